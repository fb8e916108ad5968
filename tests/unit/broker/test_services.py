"""Handlers see the broker as ``context.BrokerServices``, declared without importing the server; the server's
Broker provides all of it, and the handlers use nothing else of it."""

import ast
import pathlib

import freshet.broker.handlers
from freshet.broker.config import BrokerConfig
from freshet.broker.context import BrokerServices
from freshet.broker.server import Broker

SERVICES = set(BrokerServices.__annotations__) | {n for n in vars(BrokerServices) if not n.startswith("_")}


def _broker_attributes_used(tree: ast.AST) -> set[str]:
    """``broker.X`` and ``ctx.broker.X`` in a handler module: the X."""
    used = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == "broker":
            used.add(node.attr)
        elif isinstance(owner, ast.Attribute) and owner.attr == "broker":
            used.add(node.attr)
    return used


def test_the_broker_provides_every_service(tmp_path):
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    try:
        assert isinstance(broker, BrokerServices)
        for name in SERVICES:
            assert hasattr(broker, name), name
    finally:
        broker.registry.close()


def test_handlers_use_only_the_declared_services():
    folder = pathlib.Path(freshet.broker.handlers.__file__).parent
    used = set()
    for path in sorted(folder.glob("*.py")):
        used |= _broker_attributes_used(ast.parse(path.read_text()))
    assert used, "the scan found no use of the broker at all"
    assert used <= SERVICES, f"handlers use undeclared broker attributes: {sorted(used - SERVICES)}"


def test_an_object_lacking_a_service_is_not_a_broker():
    class Partial:
        config = registry = None

    assert not isinstance(Partial(), BrokerServices)
