"""A tiny offline tool environment: a stationery shop with a catalogue, stock and orders.

Every episode starts from the same seed state (`Shop.seed()`), so a task's success check is a pure
function of the shop after the episode (and, for questions, of the agent's answer). The tools are plain
Python functions acting on the shop of the running episode (a context variable), so one `dspy.ReAct`
program can be run on many episodes, in threads too. A failed action raises `ShopError`, which ReAct
shows the agent as ``Execution error in <tool>: ...``.
"""

from __future__ import annotations

import contextvars
import copy
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import dspy

# --------------------------------------------------------------------------------------------
# The store


@dataclass
class Item:
    sku: str
    name: str
    category: str
    price: float
    stock: int


@dataclass
class Order:
    order_id: str
    sku: str
    quantity: int
    status: str = "placed"  # "placed" | "cancelled"


class ShopError(ValueError):
    """A tool call the shop refuses (unknown sku or order, not enough stock, already cancelled)."""


SEED_ITEMS = [
    Item("MUG-BLUE", "Blue ceramic mug", "mug", 8.50, 5),
    Item("MUG-RED", "Red ceramic mug", "mug", 8.50, 1),
    Item("MUG-GREEN", "Green ceramic mug", "mug", 9.00, 0),
    Item("NB-A5", "A5 dotted notebook", "notebook", 4.20, 10),
    Item("NB-A4", "A4 lined notebook", "notebook", 5.90, 7),
    Item("NB-POCKET", "Pocket notebook", "notebook", 2.75, 3),
    Item("PEN-GREEN", "Green gel pen", "pen", 1.20, 40),
    Item("PEN-BLACK", "Black gel pen", "pen", 1.10, 0),
    Item("LAMP-DESK", "LED desk lamp", "lamp", 24.00, 2),
]
SEED_ORDERS = [
    Order("O-1001", "MUG-BLUE", 1),
    Order("O-1002", "PEN-GREEN", 1),
    Order("O-1003", "NB-A4", 2, "cancelled"),
]


def _words(text: str) -> set[str]:
    """Lower-case words, plural 's' dropped, so 'mugs' finds 'mug'."""
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in re.findall(r"[a-z0-9]+", text.lower())}


@dataclass
class Shop:
    items: dict[str, Item] = field(default_factory=dict)
    orders: dict[str, Order] = field(default_factory=dict)
    next_order: int = 2001

    @classmethod
    def seed(cls) -> "Shop":
        return cls({i.sku: copy.copy(i) for i in SEED_ITEMS}, {o.order_id: copy.copy(o) for o in SEED_ORDERS})

    def snapshot(self) -> dict:
        return {"items": {s: (i.stock,) for s, i in self.items.items()},
                "orders": {o.order_id: (o.sku, o.quantity, o.status) for o in self.orders.values()}}

    def new_orders(self) -> list[Order]:
        seeded = {o.order_id for o in SEED_ORDERS}
        return [o for o in self.orders.values() if o.order_id not in seeded and o.status == "placed"]

    def status(self, order_id: str) -> str | None:
        order = self.orders.get(order_id)
        return order.status if order else None

    # -- the actions behind the tools
    def search(self, query: str) -> list[dict]:
        wanted = _words(query)
        hits = [i for i in self.items.values() if wanted and wanted <= _words(f"{i.name} {i.category}")]
        return [{"sku": i.sku, "name": i.name, "price": i.price} for i in hits]

    def get_item(self, sku: str) -> dict:
        item = self.items.get(sku)
        if item is None:
            raise ShopError(f"no item with sku {sku!r}")
        return {"sku": item.sku, "name": item.name, "category": item.category, "price": item.price,
                "stock": item.stock}

    def place_order(self, sku: str, quantity: int) -> dict:
        item = self.items.get(sku)
        if item is None:
            raise ShopError(f"no item with sku {sku!r}")
        quantity = int(quantity)
        if quantity < 1:
            raise ShopError(f"quantity must be at least 1, got {quantity}")
        if item.stock < quantity:
            raise ShopError(f"only {item.stock} of {sku} in stock, cannot order {quantity}")
        item.stock -= quantity
        order = Order(f"O-{self.next_order}", sku, quantity)
        self.next_order += 1
        self.orders[order.order_id] = order
        return {"order_id": order.order_id, "sku": sku, "quantity": quantity, "status": order.status,
                "total": round(item.price * quantity, 2)}

    def cancel_order(self, order_id: str) -> dict:
        order = self.orders.get(order_id)
        if order is None:
            raise ShopError(f"no order {order_id!r}")
        if order.status == "cancelled":
            raise ShopError(f"order {order_id} is already cancelled")
        order.status = "cancelled"
        self.items[order.sku].stock += order.quantity
        return {"order_id": order_id, "status": "cancelled"}


_CURRENT: contextvars.ContextVar[Shop | None] = contextvars.ContextVar("agent_example_shop", default=None)


@contextmanager
def active(shop: Shop) -> Iterator[Shop]:
    """Make `shop` the one the tools act on, for the duration of the block."""
    token = _CURRENT.set(shop)
    try:
        yield shop
    finally:
        _CURRENT.reset(token)


def current_shop() -> Shop:
    shop = _CURRENT.get()
    if shop is None:
        raise RuntimeError("no active shop: run tools inside env.active(shop) (ShopAgent does this)")
    return shop


# --------------------------------------------------------------------------------------------
# The tools (docstrings and type hints are what ReAct shows the agent)


def search(query: str) -> list[dict]:
    """Search the catalogue; returns matching items as {sku, name, price}. Stock is not included."""
    return current_shop().search(query)


def get_item(sku: str) -> dict:
    """Details of one item by sku, including its current stock."""
    return current_shop().get_item(sku)


def place_order(sku: str, quantity: int) -> dict:
    """Order `quantity` units of the item `sku`; fails when there is not enough stock."""
    return current_shop().place_order(sku, quantity)


def cancel_order(order_id: str) -> dict:
    """Cancel an order by id (e.g. O-1001); fails when it does not exist or is already cancelled."""
    return current_shop().cancel_order(order_id)


TOOLS = [search, get_item, place_order, cancel_order]


# --------------------------------------------------------------------------------------------
# Tasks and their true success checks


@dataclass(frozen=True)
class Task:
    task_id: str
    request: str
    check: Callable[[Shop, str], bool]  # (shop after the episode, final answer) -> success
    split: str  # "train" (the optimizer may see it) or "test"

    def example(self) -> dspy.Example:
        """The optimizer's view: the request only; the check is never part of the example."""
        return dspy.Example(request=self.request, task_id=self.task_id).with_inputs("request")


def _only_new(shop: Shop, sku: str, quantity: int) -> bool:
    new = shop.new_orders()
    return len(new) == 1 and new[0].sku == sku and new[0].quantity == quantity


def _untouched(shop: Shop) -> bool:
    return shop.snapshot() == Shop.seed().snapshot()


def _says(answer: str, *words: str) -> bool:
    return any(w.lower() in (answer or "").lower() for w in words)


TASKS = [
    Task("blue-mugs", "Please order 2 blue ceramic mugs.",
         lambda s, a: _only_new(s, "MUG-BLUE", 2) and s.status("O-1001") == "placed", "train"),
    Task("cancel-1001", "Cancel my order O-1001.",
         lambda s, a: s.status("O-1001") == "cancelled" and not s.new_orders() and s.status("O-1002") == "placed",
         "train"),
    Task("lamp-stock", "How many LED desk lamps are in stock?",
         lambda s, a: _untouched(s) and re.search(r"\b2\b|\btwo\b", a or "", re.I) is not None, "train"),
    Task("red-mugs-short", "Order 3 red ceramic mugs.",
         lambda s, a: _untouched(s) and _says(a, "stock"), "train"),
    Task("green-pens", "Order 10 green gel pens.",
         lambda s, a: _only_new(s, "PEN-GREEN", 10), "train"),
    Task("cheapest-notebook", "Buy one notebook, whichever is cheapest.",
         lambda s, a: _only_new(s, "NB-POCKET", 1), "test"),
    Task("cancel-1003", "Cancel order O-1003.",
         lambda s, a: _untouched(s) and _says(a, "already"), "test"),
    Task("replace-1002", "Change order O-1002 to 3 green gel pens instead of 1.",
         lambda s, a: s.status("O-1002") == "cancelled" and _only_new(s, "PEN-GREEN", 3), "test"),
    Task("black-pens-short", "Order 5 black gel pens.",
         lambda s, a: _untouched(s) and _says(a, "stock"), "test"),
    Task("red-mug-price", "What is the price of the red ceramic mug?",
         lambda s, a: _untouched(s) and _says(a, "8.50", "8.5"), "test"),
]


def task_by_request(request: str) -> Task | None:
    return next((t for t in TASKS if t.request == request), None)


# --------------------------------------------------------------------------------------------
# The agent


class ShopRequest(dspy.Signature):
    """You are a shop assistant. Carry out the customer's request with the tools, then answer them.
    Only say an action happened when a tool result shows it succeeded."""

    request: str = dspy.InputField(desc="The customer's request.")
    answer: str = dspy.OutputField(desc="Your reply to the customer: what you did, or why you could not.")


class ShopAgent(dspy.Module):
    """A `dspy.ReAct` agent over the shop tools; each call runs one episode on a fresh seed shop
    (or on `shop`, when given, so the caller can check the state afterwards)."""

    def __init__(self, max_iters: int = 8):
        super().__init__()
        self.react = dspy.ReAct(ShopRequest, tools=TOOLS, max_iters=max_iters)

    def forward(self, request: str, shop: Shop | None = None):
        with active(shop if shop is not None else Shop.seed()):
            return self.react(request=request)


@dataclass
class Episode:
    task: Task
    prediction: dspy.Prediction | None
    success: bool
    error: str | None = None


def run_episode(agent: ShopAgent, task: Task) -> Episode:
    """Run `agent` on `task` on a fresh shop and apply the task's true success check.

    A program that crashes (e.g. an unparsable LM reply) is a failed episode, recorded with its error."""
    shop = Shop.seed()
    try:
        prediction = agent(request=task.request, shop=shop)
    except Exception as error:  # noqa: BLE001 - an agent crash is a failed episode, not a stopped run
        return Episode(task, None, False, f"{type(error).__name__}: {error}")
    return Episode(task, prediction, bool(task.check(shop, str(prediction.get("answer") or ""))))
