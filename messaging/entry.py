"""Discovery entries: what a messaging client or server publishes about itself, signed by its own key.

The JSON is Skywire's messaging-discovery Entry, field for field and in its order:

  {"version":"0.0.1","sequence":N,"timestamp":UNIX_NS,"static":"<66 hex>",
   "client":{"delegated_servers":["<66 hex>", ...]},                      (clients; omitted otherwise)
   "server":{"address":"host:port","port":"","available_connections":N}, (servers; omitted otherwise)
   "signature":"<130 hex>"}

The signature signs SHA-256 of the entry's JSON without "signature", written as Go's json.Marshal writes
it (compact, fields in the order above, `<` `>` `&` escaped as \\u003c \\u003e \\u0026), so an entry signed
by either implementation verifies in the other. Like Go, a parsed entry is re-serialised from its fields
for verification: unknown fields are ignored and not signed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import keys
from .errors import KeyFormatError

VERSION = "0.0.1"
MAX_DELEGATED_SERVERS = 32
MAX_TEXT = 255
_U64, _I64 = (1 << 64) - 1, (1 << 63) - 1


class EntryError(ValueError):
    """An entry that is malformed (wrong types, sizes or keys); the message says which field."""


@dataclass(frozen=True)
class ClientInfo:
    delegated_servers: tuple[bytes, ...] | None  # None is Go's nil slice, written as null


@dataclass(frozen=True)
class ServerInfo:
    address: str  # host:port that clients dial
    port: str = ""
    available_connections: int = 0


@dataclass(frozen=True)
class Entry:
    static: bytes
    sequence: int
    timestamp: int
    client: ClientInfo | None = None
    server: ServerInfo | None = None
    version: str = VERSION
    signature: bytes | None = None

    # ---- JSON
    def to_json(self, with_signature: bool = True) -> bytes:
        parts = [f'"version":{go_string(self.version)}', f'"sequence":{self.sequence}',
                 f'"timestamp":{self.timestamp}', f'"static":"{self.static.hex()}"']
        if self.client is not None:
            servers = self.client.delegated_servers
            listed = "null" if servers is None else "[" + ",".join(f'"{k.hex()}"' for k in servers) + "]"
            parts.append('"client":{"delegated_servers":' + listed + "}")
        if self.server is not None:
            s = self.server
            parts.append(f'"server":{{"address":{go_string(s.address)},"port":{go_string(s.port)},'
                         f'"available_connections":{s.available_connections}}}')
        if with_signature and self.signature is not None:
            parts.append(f'"signature":"{self.signature.hex()}"')
        return ("{" + ",".join(parts) + "}").encode()

    @classmethod
    def from_obj(cls, obj: object) -> Entry:
        """Parse a decoded JSON object, checking every type and size; raises EntryError."""
        if not isinstance(obj, dict):
            raise EntryError("entry must be a JSON object")
        version = _text(obj, "version")
        sequence = _integer(obj, "sequence", 0, _U64)
        timestamp = _integer(obj, "timestamp", -_I64 - 1, _I64)
        static = _key(obj.get("static"), "static")
        client = server = None
        if obj.get("client") is not None:
            c = obj["client"]
            if not isinstance(c, dict):
                raise EntryError("'client' must be an object")
            listed = c.get("delegated_servers")
            if listed is not None:
                if not isinstance(listed, list) or len(listed) > MAX_DELEGATED_SERVERS:
                    raise EntryError(f"'delegated_servers' must be a list of at most {MAX_DELEGATED_SERVERS} keys")
                listed = tuple(_key(k, "delegated_servers") for k in listed)
            client = ClientInfo(listed)
        if obj.get("server") is not None:
            s = obj["server"]
            if not isinstance(s, dict):
                raise EntryError("'server' must be an object")
            server = ServerInfo(_text(s, "address"), _text(s, "port", required=False),
                                _integer(s, "available_connections", -_I64 - 1, _I64, required=False))
        signature = obj.get("signature")
        if signature in (None, ""):
            signature = None
        else:
            try:
                signature = keys.parse_signature(signature) if isinstance(signature, str) else None
            except KeyFormatError as exc:
                raise EntryError(f"'signature': {exc}") from exc
            if signature is None:
                raise EntryError("'signature' must be a string")
        return cls(static, sequence, timestamp, client, server, version, signature)

    # ---- signatures
    def signed(self, secret: keys.SecretKey) -> Entry:
        unsigned = replace(self, signature=None)
        return replace(unsigned, signature=secret.sign(unsigned.to_json(with_signature=False)))

    def signature_ok(self) -> bool:
        return self.signature is not None and keys.verify(self.static, self.signature,
                                                          self.to_json(with_signature=False))

    def problem(self) -> str | None:
        """Skywire's Entry.Validate: what makes the entry unacceptable whatever is stored, or None."""
        if not self.version:
            return "entry has no version"
        if self.signature is None:
            return "entry has no signature"
        if self.client is None and self.server is None:
            return "entry has neither client or server field"
        if self.server is not None and not self.server.address:
            return "server entry has no address"
        return None


def go_string(text: str) -> str:
    """`text` as a JSON string the way Go's encoding/json writes it (HTML-safe escaping)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or ch in "<>&" or code in (0x2028, 0x2029):
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\ufffd")  # Go replaces invalid UTF-8 (a lone surrogate here) with U+FFFD
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _text(obj: dict, name: str, required: bool = True) -> str:
    value = obj.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise EntryError(f"'{name}' must be a string")
    if len(value) > MAX_TEXT:
        raise EntryError(f"'{name}' is longer than {MAX_TEXT} characters")
    return value


def _integer(obj: dict, name: str, low: int, high: int, required: bool = True) -> int:
    value = obj.get(name)
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise EntryError(f"'{name}' must be an integer in [{low}, {high}]")
    return value


def _key(value: object, name: str) -> bytes:
    if not isinstance(value, str):
        raise EntryError(f"'{name}' must hold public keys as hex strings")
    try:
        return keys.parse_public_key(value)
    except KeyFormatError as exc:
        raise EntryError(f"'{name}': {exc}") from exc
