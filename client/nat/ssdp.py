"""SSDP discovery (UPnP Device Architecture 1.1, section 1.3), sans-IO: the M-SEARCH a control point multicasts
and the unicast answers' LOCATION (the device description's URL).

in:  the bytes of one datagram answering our search
out: the LOCATION URL, or None (not a 200 answer for the searched type, or no http LOCATION)

Only discovery: once a gateway answered, portmap.py hands its LOCATION to async-upnp-client for the
description and SOAP calls, so a network without a UPnP gateway never loads that library (and aiohttp).
"""

from __future__ import annotations

ADDRESS = ("239.255.255.250", 1900)
MAX_ANSWER = 2048  # bytes of one answer we read; real ones are a few hundred


def search_request(search_target: str, mx: int, host: tuple[str, int] = ADDRESS) -> bytes:
    """An M-SEARCH for `search_target`; devices answer within `mx` seconds (1 to 5)."""
    if not 1 <= mx <= 5:
        raise ValueError(f"MX {mx} is outside 1..5")
    return (f"M-SEARCH * HTTP/1.1\r\nHOST: {host[0]}:{host[1]}\r\nMAN: \"ssdp:discover\"\r\n"
            f"MX: {mx}\r\nST: {search_target}\r\n\r\n").encode()


def parse_answer(data: bytes, search_target: str) -> str | None:
    """The LOCATION of an `HTTP/1.1 200 OK` answer whose ST is `search_target`, else None."""
    lines = data[:MAX_ANSWER].decode("latin-1").split("\r\n" if b"\r\n" in data else "\n")
    if not lines[0].upper().startswith("HTTP/1.1 200"):
        return None
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    location = headers.get("location", "")
    if headers.get("st") != search_target or not location.lower().startswith("http://"):
        return None
    return location
