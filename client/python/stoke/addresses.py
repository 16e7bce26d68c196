"""Coordinator address lists: ``"10.0.0.1:50051,10.0.0.2:50051"`` names a leader and its
standbys. As in the C++ client, a list becomes one channel over every address with the
pick_first policy: calls go to the coordinator that accepts connections (a standby does
not listen) and move on when it goes.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import List, Tuple


def channel_target(addresses: str) -> Tuple[str, List[Tuple[str, object]]]:
    """The gRPC target and extra channel options for one address or a comma-separated list.

    Raises ValueError naming the list for an empty entry, a missing port, a name that does
    not resolve, or a list that mixes IPv4 and IPv6.
    """
    if "," not in addresses:
        return addresses, []
    numeric: List[str] = []
    families = set()
    entries = [entry.strip() for entry in addresses.split(",")]
    for entry in entries:
        if not entry:
            raise ValueError(f"coordinator address {addresses!r}: an empty entry")
        host, sep, port = entry.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not port.isdigit():
            raise ValueError(f"coordinator address {addresses!r}: {entry!r} is not host:port")
        try:
            address = str(ipaddress.ip_address(host))
        except ValueError:
            try:
                address = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
            except OSError:
                try:
                    address = socket.getaddrinfo(host, None, socket.AF_INET6, socket.SOCK_STREAM)[0][4][0]
                except OSError as e:
                    raise ValueError(f"coordinator address {addresses!r}: cannot resolve {host!r}") from e
        v6 = ipaddress.ip_address(address).version == 6
        families.add(v6)
        numeric.append(f"[{address}]:{port}" if v6 else f"{address}:{port}")
    if len(families) > 1:
        raise ValueError(f"coordinator address {addresses!r}: mixes IPv4 and IPv6 addresses")
    scheme = "ipv6" if True in families else "ipv4"
    # TLS checks the certificate against the authority: the first entry as written.
    options = [("grpc.lb_policy_name", "pick_first"), ("grpc.default_authority", entries[0])]
    return f"{scheme}:{','.join(numeric)}", options
