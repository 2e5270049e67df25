"""The address-discovery extension added to aioquic's QuicConnection (aioquic has no hook for it).

What this changes in aioquic, through its internal methods (checked at import, so an aioquic that moved
them fails at start-up with one clear line rather than misbehaving):
- `_serialize_transport_parameters`: our role is appended to the parameters aioquic sends;
- `_parse_transport_parameters`: the peer's role is read from the raw parameters (aioquic skips unknown ones);
- the private frame-handler table gains the two OBSERVED_ADDRESS types (aioquic closes the connection on
  any frame type it does not know);
- `_write_application`: before aioquic's own frames, a reporter whose peer wants reports sends one
  OBSERVED_ADDRESS for the active path's address whenever that address has not been reported yet (the
  first 1-RTT flight, and again after the client's NAT rebinds it); a report whose packet is lost is sent
  again with the next sequence number.
"""

from __future__ import annotations

from collections.abc import Callable

from aioquic.quic.connection import EPOCHS, QuicConnection, QuicConnectionError, QuicNetworkPath
from aioquic.quic.packet import QuicErrorCode, QuicPacketType
from aioquic.quic.packet_builder import QuicDeliveryState, QuicPacketBuilder, QuicPacketBuilderStop
from aioquic.tls import Epoch

from .qad import (
    FRAME_TYPES,
    Observed,
    QadError,
    Role,
    encode_parameter,
    find_role,
    observed_body,
    parse_observed,
)

_HOOKS = ("_serialize_transport_parameters", "_parse_transport_parameters", "_write_application",
          "_QuicConnection__frame_handlers")


def check_aioquic() -> None:
    """Raise RuntimeError if this aioquic lacks what the extension relies on."""
    missing = [name for name in _HOOKS[:3] if not callable(getattr(QuicConnection, name, None))]
    if missing:
        import aioquic
        raise RuntimeError(f"aioquic {aioquic.__version__} lacks {', '.join(missing)}: QUIC address discovery "
                           "needs aioquic 1.2 to 1.x")


check_aioquic()


class QadConnection(QuicConnection):
    """A QuicConnection that speaks QUIC Address Discovery in `role`.

    `observed` is the newest report received (a RECEIVES or BOTH endpoint); `on_observed(Observed)` is
    called for each newer one. `reports_sent` counts the reports this side sent.
    """

    def __init__(self, *, role: Role, on_observed: Callable[[Observed], None] | None = None,
                 max_streams: int | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.qad_role = role
        self.peer_role: Role | None = None
        self.observed: Observed | None = None
        self.reports_sent = 0
        self._on_observed = on_observed
        self._reported: tuple | None = None  # the path address of the report in flight or acknowledged
        self._next_seq = 0
        handlers = self.__dict__.get("_QuicConnection__frame_handlers")
        if handlers is None:
            raise RuntimeError("aioquic's frame-handler table moved: QUIC address discovery cannot be added")
        for frame_type in FRAME_TYPES:
            handlers[frame_type] = (self._handle_observed_frame, EPOCHS("1"))
        if max_streams is not None:  # a QAD server carries no streams at all
            self._local_max_streams_bidi.value = self._local_max_streams_uni.value = max_streams

    # ---- transport parameters
    def _serialize_transport_parameters(self) -> bytes:
        return super()._serialize_transport_parameters() + encode_parameter(self.qad_role)

    def _parse_transport_parameters(self, data: bytes, from_session_ticket: bool = False) -> None:
        super()._parse_transport_parameters(data, from_session_ticket)
        try:
            self.peer_role = find_role(data)
        except QadError as exc:
            raise QuicConnectionError(error_code=QuicErrorCode.TRANSPORT_PARAMETER_ERROR, frame_type=None,
                                      reason_phrase=str(exc)) from None

    # ---- receiving reports
    def _handle_observed_frame(self, context, frame_type: int, buf) -> None:
        if self.qad_role not in (Role.RECEIVES, Role.BOTH):
            raise QuicConnectionError(error_code=QuicErrorCode.PROTOCOL_VIOLATION, frame_type=frame_type,
                                      reason_phrase="OBSERVED_ADDRESS without asking for reports")
        start = buf.tell()
        try:
            report, used = parse_observed(frame_type, buf.data_slice(start, buf.capacity))
        except QadError as exc:
            raise QuicConnectionError(error_code=QuicErrorCode.FRAME_ENCODING_ERROR, frame_type=frame_type,
                                      reason_phrase=str(exc)) from None
        buf.seek(start + used)
        if self.observed is None or report.seq > self.observed.seq:
            self.observed = report
            if self._on_observed is not None:
                self._on_observed(report)

    # ---- sending reports
    def _write_application(self, builder: QuicPacketBuilder, network_path: QuicNetworkPath, now: float) -> None:
        if (self._handshake_complete and self._reported != network_path.addr
                and self.qad_role.reports_to(self.peer_role) and self._cryptos[Epoch.ONE_RTT].send.is_valid()):
            self._write_report(builder, network_path.addr)
        super()._write_application(builder, network_path, now)

    def _write_report(self, builder: QuicPacketBuilder, addr: tuple) -> None:
        frame_type, body = observed_body(self._next_seq, addr[0], addr[1])
        builder.start_packet(QuicPacketType.ONE_RTT, self._cryptos[Epoch.ONE_RTT])
        try:
            buf = builder.start_frame(frame_type, capacity=len(body), handler=self._on_report_delivery,
                                      handler_args=(addr,))
        except QuicPacketBuilderStop:  # congestion window full: the next flight carries it
            return
        buf.push_bytes(body)
        self._reported = addr
        self._next_seq += 1
        self.reports_sent += 1

    def _on_report_delivery(self, delivery: QuicDeliveryState, addr: tuple) -> None:
        if delivery == QuicDeliveryState.LOST and self._reported == addr:
            self._reported = None  # report again, with a new sequence number
