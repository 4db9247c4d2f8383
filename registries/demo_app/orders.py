"""Two tools that pass data along a lane: ``find_order`` reports a status and hands the customer
and the total on; ``draft_refund`` receives them from the lane payload (registries/orders.yml)."""

ORDERS = {"A-17": ("ACME Corp", 250), "B-42": ("Globex", 80)}


def find_order(order: str) -> dict:
    found = ORDERS.get(order)
    if found is None:
        return {"status": "missing", "reason_code": "no_such_order"}
    customer, total = found
    return {"status": "found", "customer": customer, "total": total}


def draft_refund(order: str, customer: str, total: int) -> dict:
    return {"draft": f"Refund {total} to {customer} for order {order}", "total": total}
