"""Model providers: a request in, a reply with usage out (openai, anthropic, replay, and a
scripted fake for tests). Nothing here retries, sleeps or keeps a deadline."""

from .base import (ERROR_KINDS, PROVIDERS, ModelReply, ModelRequest, Price, Profile, Provider, ProviderError,
                   make_provider, make_providers, parse_retry_after)

__all__ = ["ERROR_KINDS", "PROVIDERS", "ModelReply", "ModelRequest", "Price", "Profile", "Provider",
           "ProviderError", "make_provider", "make_providers", "parse_retry_after"]
