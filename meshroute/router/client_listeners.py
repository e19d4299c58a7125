"""
A router's listeners for clients: the native protocol's
(C{[clients] endpoint}), STOMP's (C{[stomp.listener]}) and MQTT's
(C{[mqtt.listener]}), each on its endpoints, plain or TLS, and STOMP's
and MQTT's over WebSocket too, C{client-ca} applied to whichever are TLS.

The three share one session registry (one C{/api/v1/sessions}, one
C{max-sessions}) and one security policy, so that a client is the same
user and counts against the same bounds whatever protocol it speaks; the
STOMP and MQTT sessions' settings are the native listener's, with their
own TTL override and limits.  Their listening services are children of
the router's service, which starts them once the store is open
(L{meshroute.router.listening}); when it stops, L{ClientListeners.stop}
sends their clients away or drops them.
"""

from dataclasses import replace
from functools import partial

from twisted.application.service import MultiService
from twisted.internet.endpoints import SSL4ServerEndpoint
from twisted.internet.interfaces import IReactorTime

from meshroute.mqtt.listener import MQTT_SUBPROTOCOLS, MqttFactory
from meshroute.router.listening import listening
from meshroute.router.settings import RouterConfig, keyed
from meshroute.security.decoy import decoy_secret
from meshroute.sessions.limits import ClientLimits, client_limits
from meshroute.sessions.native_listener import ClientFactory
from meshroute.sessions.settings import SessionSettings
from meshroute.sessions.tls import load_client_ca, verify_client_certificates
from meshroute.stomp.listener import StompFactory
from meshroute.stomp.websocket import websocket_factory
from meshroute.wire.client_frames import MAX_FRAME_SIZE


class ClientListeners:
    """
    The client listeners of one router, their services made children of
    C{parent}.

    @param engine: the router's L{meshroute.router.engine.MessageEngine}.
    @param endpoints: turns endpoint strings into endpoints.
    @param events: the router's event log.
    @param ha_view: returns the router's L{meshroute.sessions.ha_view.HAView},
        which the listeners answer a hello by.
    @param security: the router's L{meshroute.security.policy.Security},
        or None: clients are not authenticated.
    @ivar native: the native listener's factory, whose sessions are every
        protocol's (it exists, serving nothing, without C{[clients]}).
    @ivar stomp: the STOMP listener's factory, or None.
    @ivar mqtt: the MQTT listener's factory, or None.
    """

    def __init__(self, config: RouterConfig, engine, clock: IReactorTime, endpoints, events,
                 ha_view, security, parent: MultiService) -> None:
        self._config = config
        self._clock = clock
        self._endpoints = endpoints
        self._parent = parent
        clients = config.clients
        reconnect = config.client_reconnect
        self.native = ClientFactory(
            engine, clock,
            max_frame_size=clients.max_frame_size if clients is not None else MAX_FRAME_SIZE,
            settings=SessionSettings(
                connection_ttl_override=(
                    clients.connection_ttl_override if clients is not None else -1),
                connection_ttl_check_interval_ms=(
                    clients.connection_ttl_check_interval_ms if clients is not None else 2000),
                keep_alive_ms=reconnect.keep_alive_ms,
                max_depth=reconnect.max_depth,
                queue_depth=config.client_queue.queue_depth,
                max_depth_policy=reconnect.max_depth_policy,
                recovery_buffer_size=reconnect.recovery_buffer_size,
                limits=client_limits(clients) if clients is not None else ClientLimits(),
                send_answer_hold_ms=clients.send_answer_hold_ms if clients is not None else 0,
            ),
            events=events,
            ha_view=ha_view,
            security=security,
            secret=decoy_secret(config.data_dir) if security is not None else None,
            verifies_certificates=clients is not None and clients.client_ca is not None,
        )
        if clients is not None:
            ca = load_client_ca(clients.client_ca) if clients.client_ca is not None else None
            for key, description in keyed("clients.listener.endpoint", clients.endpoint):
                listening_clients = listening(endpoints, config, key, description, self.native)
                if ca is not None and isinstance(listening_clients.endpoint, SSL4ServerEndpoint):
                    verify_client_certificates(listening_clients.endpoint, ca)
                listening_clients.setServiceParent(parent)
        self.stomp: StompFactory | None = None
        if config.stomp_listener is not None:
            stomp = config.stomp_listener
            self.stomp = StompFactory(
                engine, clock, self._sessions_settings(stomp),
                sessions=self.native.sessions, prefetch_count=stomp.prefetch_count,
                heartbeat_ms=stomp.heartbeat_ms, events=events, ha_view=ha_view,
                security=security, secret=self.native.secret,
                verifies_certificates=stomp.client_ca is not None,
            )
            self._serve("stomp.listener", stomp, self.stomp, websocket_factory)
        self.mqtt: MqttFactory | None = None
        if config.mqtt_listener is not None:
            mqtt = config.mqtt_listener
            self.mqtt = MqttFactory(
                engine, clock, self._sessions_settings(mqtt),
                mqtt, sessions=self.native.sessions, events=events, ha_view=ha_view,
                security=security, secret=self.native.secret,
                verifies_certificates=mqtt.client_ca is not None,
            )
            self._serve("mqtt.listener", mqtt, self.mqtt,
                        partial(websocket_factory, subprotocols=MQTT_SUBPROTOCOLS, text=False))

    def _sessions_settings(self, listener) -> SessionSettings:
        """
        The sessions' settings of a protocol listener: the native
        listener's, with its own TTL override and limits, and every send
        answered at once (the hold is the native listener's alone).
        """
        return replace(self.native.settings,
                       connection_ttl_override=listener.ttl_override_ms,
                       limits=listener.limits, send_answer_hold_ms=0)

    def _serve(self, prefix: str, listener, factory, over_websocket) -> None:
        """
        A protocol listener's endpoints (C{PREFIX.endpoint}) and WebSocket
        endpoints (C{PREFIX.websocket}, C{over_websocket(factory, url,
        clock)}), C{client-ca} applied to whichever of them are TLS.
        """
        endpoints, config = self._endpoints, self._config
        services = [listening(endpoints, config, key, description, factory)
                    for key, description in keyed(f"{prefix}.endpoint", listener.endpoint)]
        if listener.websocket:
            served = over_websocket(factory, f"ws://localhost{listener.websocket_path}",
                                    self._clock)
            services += [listening(endpoints, config, key, description, served)
                         for key, description in keyed(f"{prefix}.websocket",
                                                       listener.websocket)]
        ca = load_client_ca(listener.client_ca) if listener.client_ca is not None else None
        for service in services:
            if ca is not None and isinstance(service.endpoint, SSL4ServerEndpoint):
                verify_client_certificates(service.endpoint, ca)
            service.setServiceParent(self._parent)

    def stop(self, hosted: bool) -> None:
        """
        The router stops: a C{hosted} one (an HA instance's active period)
        sends its clients away (C{not-active}: the other instance takes
        them); a router on its own drops them, as a crash would.
        """
        for factory in (self.native, self.stomp, self.mqtt):
            if factory is None:
                continue
            if hosted:
                factory.stop_serving()
            else:
                factory.close_connections()

    def describe_sessions(self) -> list[dict]:
        "C{GET /api/v1/sessions}: every protocol's sessions (one registry)."
        return self.native.describe()
