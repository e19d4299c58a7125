"""
Topic subscriptions on the in-memory mesh (L{meshroute.testing.memory_mesh}):
a subscriber that acknowledges what it gets, publications, and a star of
five routers.
"""


class TopicConsumer:
    """
    Subscribes to a pattern at one router and acknowledges what it gets.
    """

    def __init__(self, router, pattern: str, credit: int = 1000, **durable) -> None:
        self.received = []
        self.subscription = None
        d = router.engine.topics.subscribe(pattern, self._deliver, 0, **durable)
        d.addCallback(self._subscribed, credit)
        self.failure = []
        d.addErrback(self.failure.append)

    def _subscribed(self, subscription, credit: int) -> None:
        self.subscription = subscription
        subscription.add_credit(credit)

    def _deliver(self, delivery) -> None:
        self.received.append(delivery.message)
        self.subscription.ack([delivery.delivery_id])
        self.subscription.add_credit(1)

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.received]


def publish(mesh, router: str, topic: str, count: int, start: int = 0, persistent=True):
    """
    C{count} publications to C{topic} at C{router}, bodies numbered from
    C{start}: their Deferreds.
    """
    engine = mesh.routers[router].engine
    return [engine.submit(f"topic:{topic}", b"%d" % i, {}, persistent)
            for i in range(start, start + count)]


def star(mesh) -> None:
    """
    a - b - c, and d and e beyond b.
    """
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.add("router-c", connect_to=["router-b"])
    mesh.add("router-d", connect_to=["router-b"])
    mesh.add("router-e", connect_to=["router-d"])
    mesh.run(1)
