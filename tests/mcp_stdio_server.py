"""A small MCP server over stdio for the tests, written with the standard library only (it starts
in a few milliseconds): newline-delimited JSON-RPC on standard input and output, as the MCP stdio
transport says.

Usage: python tests/mcp_stdio_server.py [--count FILE] [--noise] [--slow-start SECONDS]

--count FILE         appends a line to FILE each time the server starts (how many starts a run made)
--noise              writes lines that are not JSON-RPC on standard output: one at start-up and one
                     before each answer to ``echo``, quoting the call's arguments (a careless server
                     printing debug output where its messages go)
--slow-start SECONDS sleeps before it reads its first message (a machine under load)

Tools: ``env`` answers with the server's whole environment (and each value's length, which
survives redaction); ``echo`` answers with its ``text``; ``leak`` fails with an error that quotes
the value of the variable its ``name`` names (a careless server); ``crash`` writes a line on
standard error and exits at once.
"""

from __future__ import annotations

import json
import os
import sys
import time

TOOLS = [
    {"name": "env", "description": "The server's environment.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "echo", "description": "Say the text back.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "crash", "description": "Write a last word on standard error and exit.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "leak", "description": "Fail, quoting a variable.",
     "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
]


def option(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def answer(msg: dict) -> dict:
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion"), "capabilities": {"tools": {}},
                "serverInfo": {"name": "toolloop-stdio-test", "version": "1"}}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        name, args = params.get("name"), params.get("arguments") or {}
        if name == "env":
            value = {"env": dict(os.environ), "sizes": {k: len(v) for k, v in os.environ.items()}}
        elif name == "echo":
            if "--noise" in sys.argv:
                print(f"debug: echo called with {args}", flush=True)
            value = {"text": args.get("text")}
        elif name == "crash":
            sys.stderr.write("fatal: the disk is gone\n")
            sys.stderr.flush()
            os._exit(3)
        elif name == "leak":
            text = f"cannot go on with {args.get('name')}={os.environ.get(args.get('name', ''), '')}"
            return {"isError": True, "content": [{"type": "text", "text": text}]}
        else:
            return {"isError": True, "content": [{"type": "text", "text": f"no tool {name}"}]}
        return {"structuredContent": value, "content": [{"type": "text", "text": json.dumps(value)}]}
    raise LookupError(method)


def main() -> None:
    count = option("--count")
    if count:
        with open(count, "a") as fh:
            fh.write(f"{os.getpid()}\n")
    if option("--slow-start"):
        time.sleep(float(option("--slow-start")))  # type: ignore[arg-type]
    if "--noise" in sys.argv:
        print("server starting (this line is not JSON-RPC)", flush=True)
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" not in msg:
            continue  # a notification
        try:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "result": answer(msg)}
        except LookupError:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "method not found"}}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
