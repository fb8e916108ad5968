"""Ready-made event-sourced applications: course enrollment and an accounting ledger."""

from __future__ import annotations

import importlib

from ..aggregate import Application

EXAMPLES = {"enrollment": "freshet.eventsourcing.examples.enrollment:app",
            "ledger": "freshet.eventsourcing.examples.ledger:app"}


def load_app(name: str) -> Application:
    """An example by name, or any application as ``module:attribute``."""
    target = EXAMPLES.get(name, name)
    module_name, _, attribute = target.partition(":")
    if not attribute:
        raise ValueError(f"no application {name!r}: use one of {', '.join(EXAMPLES)} or module:attribute")
    try:
        app = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load application {name!r}: {exc}") from None
    if not isinstance(app, Application):
        raise ValueError(f"{name!r} is not an eventsourcing Application")
    return app
