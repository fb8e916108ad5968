"""An accounting ledger: double entry (every posting sums to zero), no account below zero, and each
account's balance as of a date.

One ledger (a book of accounts) is one aggregate, so every posting to it is decided in order by one
processor: two withdrawals racing for the last euro cannot both pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..aggregate import Aggregate, Application, Rejected
from ..events import Codec, Command, Event
from ..projection import Projection, Writer

codec = Codec()


@codec.register_command
@dataclass(frozen=True)
class OpenAccount(Command):
    account: str
    allow_negative: bool = False  # the outside world (cash, bank): its balance mirrors the others'


@codec.register_command
@dataclass(frozen=True)
class Post(Command):
    entries: dict  # account -> amount in cents (debit positive, credit negative); sums to zero
    memo: str
    date: str  # YYYY-MM-DD, the booking date


@codec.register_event
@dataclass(frozen=True)
class AccountOpened(Event):
    account: str
    allow_negative: bool


@codec.register_event
@dataclass(frozen=True)
class Posted(Event):
    entries: dict
    memo: str
    date: str


class Ledger(Aggregate):
    type_name = "ledger"

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.balances: dict[str, int] = {}
        self.negative_allowed: list[str] = []

    def decide(self, command: Command) -> list[Event]:
        if isinstance(command, OpenAccount):
            if command.account in self.balances:
                raise Rejected(f"account {command.account} is already open")
            return [AccountOpened(command.account, command.allow_negative)]
        if isinstance(command, Post):
            if len(command.entries) < 2 or sum(command.entries.values()) != 0:
                raise Rejected("a posting needs two or more entries that sum to zero")
            for account, amount in command.entries.items():
                if account not in self.balances:
                    raise Rejected(f"no account {account}")
                if not isinstance(amount, int) or amount == 0:
                    raise Rejected(f"{account}: amounts are non-zero whole cents")
                if self.balances[account] + amount < 0 and account not in self.negative_allowed:
                    raise Rejected(f"{account} would go below zero")
            return [Posted(dict(command.entries), command.memo, command.date)]
        raise Rejected(f"a ledger does not take {type(command).__name__}")

    def apply(self, event: Event) -> None:
        if isinstance(event, AccountOpened):
            self.balances[event.account] = 0
            if event.allow_negative:
                self.negative_allowed.append(event.account)
        elif isinstance(event, Posted):
            for account, amount in event.entries.items():
                self.balances[account] += amount


app = Application("ledger", [Ledger], codec, partitions=4, snapshot_every=100)


@app.projection
class Balances(Projection):
    """Every entry with its booking date: balances now, and as of any date, by a query."""

    name = "balances"
    keyed_by_aggregate = True  # every row is one course's (or ledger's): a rebuild may split the partitions
    tables = {"entries": "ledger TEXT, version INTEGER, account TEXT, amount BIGINT, date TEXT, memo TEXT, "
                         "PRIMARY KEY (ledger, version, account)"}

    def handle(self, recorded, db: Writer) -> None:
        if isinstance(recorded.event, Posted):
            for account, amount in recorded.event.entries.items():
                db.execute("INSERT INTO {entries} VALUES (?, ?, ?, ?, ?, ?)", (
                    recorded.aggregate_id, recorded.version, account, amount, recorded.event.date,
                    recorded.event.memo))


def balance_as_of(events, date: str) -> dict[str, int]:
    """Balances from a ledger's history counting postings booked on or before ``date`` (YYYY-MM-DD)."""
    balances: dict[str, int] = {}
    for recorded in events:
        event = recorded.event
        if isinstance(event, AccountOpened):
            balances[event.account] = 0
        elif isinstance(event, Posted) and event.date <= date:
            for account, amount in event.entries.items():
                balances[account] += amount
    return balances
