"""The addresses `fdkit proxy` takes: a port alone (as socat's ``TCP-LISTEN:PORT``), an upstream
name looked up again while serving (``--resolve-every``), socat's address forms and options
(the ones it honours, and the ones it refuses by name), and an upstream that is the proxy's
own listening address, refused before it can loop, beside ones that only look like it.

Also the ``RLIMIT_NOFILE`` line that lowers the default connection cap, shown with ``-v``
only. Someone moving from socat types socat's strings; these tests check each lands where
socat would put it, or says why not.

Every proxy process is started here and stopped by its pid in a ``finally``; upstreams are
threads (or an asyncio server) on 127.0.0.1 that stop with the test. The proxy runner and the
upstreams are in ``helpers/cli_proxy.py``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.cli_proxy import (  # noqa: F401  (the fixture upstream)
    FDKIT,
    Proxy,
    Upstream,
    closed_port,
    echo,
    fdkit_proxy,
    free_port,
    recv_all,
    run,
    upstream_fixture,
)

# ------------------------------------------------------------------------------- socat's habits


@pytest.mark.parametrize("spelling", ["{port}", ":{port}"])
def test_a_port_alone_listens_on_every_interface(
    tmp_path: Path, spelling: str, upstream: Callable[..., Upstream]
) -> None:
    """As socat's TCP-LISTEN:PORT: 0.0.0.0 (it was refused: "the host is empty")."""
    up = upstream(echo)
    port = free_port()
    with fdkit_proxy(tmp_path, spelling.format(port=port), up.spec) as p:
        assert p.listen == f"0.0.0.0:{port}"
        for host in ("127.0.0.1", "127.0.0.2"):
            with socket.create_connection((host, port), timeout=10) as c:
                c.sendall(b"hi")
                assert c.recv(2) == b"hi"
        code, out = p.stop()
    assert code == 0
    assert "stopped (SIGTERM): 2 connections (peak " in out


def test_help_says_what_a_port_alone_means() -> None:
    r = subprocess.run([FDKIT, "proxy", "--help"], capture_output=True, text=True, check=False)
    text = " ".join(r.stdout.split())
    assert "PORT or :PORT (every IPv4 interface, as socat's TCP-LISTEN:PORT)" in text
    assert "--resolve-every SECONDS" in text


LOWERED = "max connections lowered from 4096 to "


def test_the_rlimit_line_is_a_detail_for_verbose_only(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    """4096 connections do not fit 1024 fds: the default cap is lowered quietly (the line came
    on every start); -v shows it, time-stamped; an explicit --max-connections says it anyway."""
    up = upstream(echo)
    small = """sh -c 'ulimit -n 1024 && exec "$0" "$@"'"""
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec, setup=small) as p:
        with p.connect() as c:
            c.sendall(b"x")
            assert c.recv(1) == b"x"
        p.wait_log("conn 1 ")
        p.stop()
    assert not any(LOWERED in line for line in p.log()), p.log()
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec, "-v", setup=small) as p:
        p.stop()
    (line,) = [line for line in p.log() if LOWERED in line]
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d fdkit proxy: max connections lowered from 4096 "
        r"to \d+: RLIMIT_NOFILE allows 1024 open files \(hard limit 1024\) and each connection "
        r"needs 6",
        line,
    ), line
    with fdkit_proxy(
        tmp_path, "127.0.0.1:0", up.spec, "--max-connections", "4096", setup=small
    ) as p:
        p.stop()
    assert [line for line in p.log() if LOWERED in line], p.log()


def tagged(tag: bytes) -> Callable[[socket.socket], None]:
    """An upstream that names itself with ``tag``, then echoes."""

    def handler(conn: socket.socket) -> None:
        conn.sendall(tag)
        echo(conn)

    return handler


def tag_through(p: Proxy) -> bytes:
    with p.connect() as c:
        tag = c.recv(1)
        c.sendall(b"x")
        assert c.recv(1) == b"x"
    return tag


def _private_hosts_file() -> str:
    """The shell that puts a private /etc/hosts in place for the proxy alone: a bind mount in
    a mount namespace of its own (``unshare -m``, or ``-rm`` for a user without root). The
    proxy's getaddrinfo reads it as it reads /etc/hosts; the machine's own stays untouched."""
    for flags in ("-m", "-rm"):
        r = subprocess.run(
            ["unshare", flags, "sh", "-c", "mount --bind /dev/null /etc/hosts"],
            capture_output=True,
            check=False,
        )
        if r.returncode == 0:
            return flags
    pytest.skip("no mount namespace here (unshare -m and -rm refused)")


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1)")
@pytest.mark.parametrize("every", ["0.2", "0"])
def test_an_upstream_name_is_looked_up_again_while_serving(
    tmp_path: Path, every: str, upstream: Callable[..., Upstream]
) -> None:
    """A name whose address changes (a DNS record, a Kubernetes Service) is followed by new
    connections (it was resolved once at start), unless --resolve-every 0 asks for once. The
    lookup is the real getaddrinfo(3) reading a hosts file this test rewrites."""
    flags = _private_hosts_file()
    first = upstream(tagged(b"A"))
    try:
        upstream(tagged(b"B"), at=("127.0.0.2", first.port))  # the same port, another address
    except OSError as e:
        pytest.skip(f"127.0.0.2:{first.port} cannot be bound here: {e}")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 upstream.fdkit.test\n")
    mount = f'mount --bind {shlex.quote(str(hosts))} /etc/hosts && exec "$0" "$@"'
    setup = shlex.join(["unshare", flags, "sh", "-c", mount])
    name = f"upstream.fdkit.test:{first.port}"
    args = ["127.0.0.1:0", name, "--resolve-every", every, "-v"]
    with fdkit_proxy(tmp_path, *args, setup=setup) as p:
        assert tag_through(p) == b"A"
        # Rewritten in place (the bind mount holds the inode), as an editor of /etc/hosts would.
        with open(hosts, "r+") as f:
            f.write("127.0.0.2 upstream.fdkit.test\n")
        if every == "0":
            time.sleep(1)
            assert tag_through(p) == b"A"
            assert not any("resolves to" in line for line in p.log()), p.log()
        else:
            line = p.wait_log("now resolves to")[0]
            assert line == (
                f"upstream upstream.fdkit.test:{first.port} now resolves to "
                f"127.0.0.2:{first.port} (was 127.0.0.1:{first.port}): new connections go there"
            )
            assert tag_through(p) == b"B"
        code, out = p.stop()
    assert code == 0
    assert "0 upstream failures" in out
    said = "once" if every == "0" else "again every 0.2 s"
    assert any(f"upstream name upstream.fdkit.test looked up {said}" in line for line in p.log())


# ------------------------------------------------------------------------------- socat's addresses


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a refused start (status 2, as for every usage error)."""
    assert (r.returncode, r.stdout) == (2, ""), (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("fdkit proxy: "), lines
    return lines[0]


@pytest.mark.parametrize(
    ("listen", "up", "message"),
    [
        ("TCP-L:0", "EXEC:cat", 'UPSTREAM "EXEC:cat": fdkit proxy does not support socat\'s EXEC:'),
        ("TCP-L:0", "SYSTEM:echo hi", "socat's SYSTEM: address"),
        ("TCP-L:0", "OPENSSL:example.com:443", "socat's OPENSSL: address"),
        ("TCP-L:0", "UDP:127.0.0.1:53", "socat's UDP: address"),
        ("TCP-L:0", "udp4-sendto:127.0.0.1:53", "socat's UDP4-SENDTO: address"),
        ("TCP-L:0", "STDIO", "socat's STDIO address"),
        ("TCP-L:0", "-", "socat's - address"),
        ("TCP-L:0", "FILE:/etc/hosts", "socat's FILE: address"),
        ("TCP-L:0", "/tmp/socket", "socat's GOPEN address (a path alone); a unix socket is "),
        ("OPENSSL-LISTEN:4443,cert=x.pem", "TCP:127.0.0.1:1", "socat's OPENSSL-LISTEN: address"),
        ("UDP-LISTEN:5353", "TCP:127.0.0.1:1", 'LISTEN "UDP-LISTEN:5353": fdkit proxy does not'),
        ("TCP:127.0.0.1:80", "TCP:127.0.0.1:1", "is socat's TCP: address, which connects"),
        ("TCP-L:0", "TCP-LISTEN:80", "is socat's TCP-LISTEN: address, which listens"),
        ("TCP-L:0,backlog=5", "TCP:127.0.0.1:1", "cannot honour socat's option backlog=5 on TCP-L"),
        ("TCP-L:0,fork=0", "TCP:127.0.0.1:1", "cannot honour socat's option fork=0"),
        ("TCP-L:0,ipv6only=1", "TCP:127.0.0.1:1", "option ipv6only=1"),
        ("TCP-L:0", "TCP:127.0.0.1:1,bind=127.0.0.2", "option bind=127.0.0.2 on TCP (it takes "),
        ("TCP-L:0", "TCP:127.0.0.1:1,fork", "cannot honour socat's option fork on TCP"),
        ("UNIX-LISTEN:/tmp/x.sock,mode=600", "TCP:127.0.0.1:1", "option mode=600 on UNIX-LISTEN"),
        ("TCP4-L:0,pf=ip6", "TCP:127.0.0.1:1", "pf=ip6 contradicts TCP4-L"),
        ("TCP-L:0", "TCP4:[::1]:80", "TCP4 takes an IPv4 address, not ::1"),
        ("TCP-L:0", "TCP6:127.0.0.1:80", "TCP6 takes an IPv6 address, not 127.0.0.1"),
        ("TCP-L:0", "TCP:127.0.0.1", "socat's TCP: address takes HOST:PORT"),
        ("TCP-LISTEN:99999", "TCP:127.0.0.1:1", "the port is not a number from 0 to 65535"),
        ("TCP-L:0", "TCP:127.0.0.1:nosuchservice", "neither a number from 0 to 65535 nor a TCP"),
        ("TCP-L:0,max-children=2", "TCP:127.0.0.1:1", "--max-connections and max-children="),
        ("TCP-L:0", "TCP:127.0.0.1:1,connect-timeout=x", 'connect-timeout= in "TCP:127.0.0.1:1,'),
    ],
)
def test_socat_addresses_fdkit_cannot_serve_are_refused_by_name(
    listen: str, up: str, message: str
) -> None:
    extra = ["--max-connections", "3"] if "max-children" in listen else []
    line = one_line_error(run(listen, up, *extra))
    assert message in line, line


def test_a_host_named_like_a_socat_type_is_still_a_host() -> None:
    """``proxy:3128`` is a host named proxy (socat's PROXY: takes three parameters)."""
    r = run("127.0.0.1:0", "proxy:3128", "--resolve-every", "0", timeout=60)
    assert "socat" not in r.stderr, r.stderr


def echo_through(p: Proxy, payload: bytes = b"socat habits") -> None:
    with p.connect() as c:
        c.sendall(payload)
        c.shutdown(socket.SHUT_WR)
        assert recv_all(c) == payload


@pytest.mark.parametrize(
    ("listen", "shown"),
    [
        ("TCP-LISTEN:0,fork,reuseaddr,bind=127.0.0.1", "127.0.0.1:"),
        ("tcp-l:0,bind=127.0.0.1,FORK,ReuseAddr=1,nodelay", "127.0.0.1:"),
        ("TCP4-LISTEN:0,bind=localhost,max-children=5", "127.0.0.1:"),
        ("TCP4-L:0", "0.0.0.0:"),
        ("TCP-L:0,pf=ip4", "0.0.0.0:"),
        ("UNIX-LISTEN:{tmp}/front.sock,fork,unlink-early,unlink-close", "unix:{tmp}/front.sock"),
        ("unix-l:{tmp}/front.sock", "unix:{tmp}/front.sock"),
        ("ABSTRACT-LISTEN:fdkit-test-{pid}", "unix:@fdkit-test-{pid}"),
    ],
)
def test_socat_listening_addresses_listen_where_socat_would(
    tmp_path: Path, listen: str, shown: str, upstream: Callable[..., Upstream]
) -> None:
    up = upstream(echo)
    fill = {"tmp": str(tmp_path), "pid": str(os.getpid())}
    with fdkit_proxy(tmp_path, listen.format(**fill), f"TCP:{up.spec}") as p:
        assert p.listen.startswith(shown.format(**fill)), p.listen
        if p.listen.startswith("0.0.0.0:"):
            p.listen = p.listen.replace("0.0.0.0", "127.0.0.1")
        if p.listen.startswith("unix:@"):
            with socket.socket(socket.AF_UNIX) as c:
                c.connect("\0" + p.listen[len("unix:@") :])
                c.sendall(b"x")
                assert c.recv(1) == b"x"
        else:
            echo_through(p)
        assert p.stop()[0] == 0


def test_socat_tcp6_listen_is_ipv6(
    tmp_path: Path, ipv6: None, upstream: Callable[..., Upstream]
) -> None:
    up = upstream(echo)
    with fdkit_proxy(tmp_path, "TCP6-LISTEN:0,bind=[::1]", f"tcp-connect:{up.spec}") as p:
        assert p.listen.startswith("[::1]:"), p.listen
        with socket.create_connection(("::1", int(p.listen.rpartition(":")[2])), 10) as c:
            c.sendall(b"v6")
            assert c.recv(2) == b"v6"
        p.stop()


@pytest.mark.parametrize(
    "spelled",
    [
        "TCP:127.0.0.1:{port}",
        "tcp-connect:127.0.0.1:{port},connect-timeout=5",
        "TCP4:localhost:{port},nodelay",
        "TCP:[127.0.0.1]:{port},pf=ip4",
        "UNIX-CONNECT:{path}",
        "UNIX:{path}",
        "unix-client:{path},connect-timeout=2.5",
    ],
)
def test_socat_upstream_addresses_connect_where_socat_would(
    tmp_path: Path, spelled: str, upstream: Callable[..., Upstream]
) -> None:
    unix = "UNIX" in spelled.upper()
    up = upstream(echo, unix=tmp_path / "back.sock" if unix else None)
    target = spelled.format(port=up.port, path=up.unix)
    with fdkit_proxy(tmp_path, "127.0.0.1:0", target, "-v") as p:
        echo_through(p)
        code, _ = p.stop()
    assert code == 0
    shown = f"unix:{up.unix}" if unix else f"127.0.0.1:{up.port}"
    if not target.lower().startswith("unix:"):  # socat's UNIX:PATH is fdkit's unix:PATH too
        assert f"{target} is {shown}" in "\n".join(p.log()), p.log()


def test_a_tcp4_name_is_looked_up_once_in_its_family(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    up = upstream(echo)
    with fdkit_proxy(tmp_path, "127.0.0.1:0", f"TCP4:localhost:{up.port}", "-v") as p:
        echo_through(p)
        p.stop()
    log = "\n".join(p.log())
    assert "upstream name localhost looked up once, at start, as 127.0.0.1:" in log, log


def test_help_shows_the_socat_forms() -> None:
    r = subprocess.run([FDKIT, "proxy", "--help"], capture_output=True, text=True, check=False)
    text = " ".join(r.stdout.split())
    assert "TCP-LISTEN:PORT[,fork,reuseaddr,bind=ADDR]" in text
    assert "UNIX-LISTEN:PATH (UNIX-L)" in text
    assert "TCP:HOST:PORT" in text
    assert "fork and reuseaddr are what the proxy always does" in text
    assert "own listening address is refused" in text


# ------------------------------------------------------------------------------- its own address


def own_address() -> str | None:
    """An address of this host that is not loopback (the one a route out would use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: connect(2) only picks a route
        except OSError:
            return None
        addr: str = s.getsockname()[0]
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


LOOP = "is this proxy's own listening address"


@pytest.mark.parametrize(
    ("listen", "up", "why"),
    [
        ("{port}", "127.0.0.1:{port}", "127.0.0.1:{port} reaches the listener on 0.0.0.0:{port}"),
        ("0.0.0.0:{port}", "localhost:{port}", "localhost resolves to "),
        ("0.0.0.0:{port}", "127.0.0.2:{port}", "127.0.0.2:{port} reaches the listener on 0.0.0.0"),
        ("127.0.0.1:{port}", "127.0.0.1:{port}", "reaches the listener on 127.0.0.1:{port}"),
        ("127.0.0.1:{port}", "0.0.0.0:{port}", "a connect to 0.0.0.0 goes to 127.0.0.1"),
        ("TCP-LISTEN:{port},fork,reuseaddr", "TCP:localhost:{port}", "localhost resolves to"),
        ("TCP4-L:{port},bind=127.0.0.1", "TCP4:127.0.0.1:{port}", "reaches the listener on 127."),
        ("0.0.0.0:{port}", "[::ffff:127.0.0.1]:{port}", "a connect to ::ffff:127.0.0.1 goes to"),
        ("0.0.0.0:{port}", "{own}:{port}", "{own}:{port} reaches the listener on 0.0.0.0:{port}"),
        ("[::]:{port}", "127.0.0.1:{port}", "reaches the listener on [::]:{port}"),
        ("[::]:{port}", "[::1]:{port}", "[::1]:{port} reaches the listener on [::]:{port}"),
        ("unix:{tmp}/p.sock", "unix:{tmp}/p.sock", "the same socket file"),
        ("UNIX-LISTEN:{tmp}/p.sock,fork", "UNIX-CONNECT:{tmp}/link.sock", "the same socket file"),
        ("unix:@fdkit-loop-{pid}", "ABSTRACT-CONNECT:fdkit-loop-{pid}", "abstract socket name"),
    ],
)
def test_an_upstream_that_is_its_own_listening_address_is_refused(
    tmp_path: Path, listen: str, up: str, why: str
) -> None:
    """One curl through ``fdkit proxy 8080 127.0.0.1:8080`` opened thousands of connections,
    each to the proxy itself: such an upstream is refused before the first is accepted."""
    fill = {"port": free_port(), "tmp": str(tmp_path), "pid": str(os.getpid())}
    if "{own}" in up:
        own = own_address()
        if own is None:
            pytest.skip("this host has no address but loopback")
        fill["own"] = own
    if "[::" in listen:
        if not socket.has_ipv6 or not _ipv6_any_bindable():
            pytest.skip("no IPv6 here")
        if "127.0.0.1" in up and Path("/proc/sys/net/ipv6/bindv6only").read_text().strip() == "1":
            pytest.skip("[::] takes IPv6 only here (net.ipv6.bindv6only = 1)")
    (tmp_path / "link.sock").symlink_to(tmp_path / "p.sock")
    t0 = time.monotonic()
    line = one_line_error(run(listen.format(**fill), up.format(**fill)))
    assert time.monotonic() - t0 < 10
    assert f'UPSTREAM "{up.format(**fill)}" {LOOP}: ' in line, line
    assert why.format(**fill) in line, line
    assert line.endswith("so every connection would open another through the proxy, without end")
    assert not (tmp_path / "p.sock").exists()  # the listener was closed and its file removed
    if "port" in listen:
        with socket.create_server(("0.0.0.0", fill["port"])):
            pass  # and the port is free again


def _ipv6_any_bindable() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::", 0))
    except OSError:
        return False
    return True


def test_port_zero_is_checked_once_the_port_is_known(tmp_path: Path) -> None:
    """A listener on port 0 gets its port from the kernel: the upstream is compared with the
    real port. A loop on port 0 cannot be typed, so the check must let it start."""
    with fdkit_proxy(tmp_path, "127.0.0.1:0", f"127.0.0.1:{closed_port()}") as p:
        assert p.stop()[0] == 0


@pytest.mark.parametrize(
    ("listen", "up"),
    [
        ("127.0.0.1:{port}", "127.0.0.2:{port}"),  # another address on the same port
        ("0.0.0.0:{port}", "[::1]:{port}"),  # an IPv4 listener is not reached over IPv6
        ("127.0.0.1:{port}", "127.0.0.1:{other}"),
        ("unix:{tmp}/a.sock", "unix:{tmp}/b.sock"),
        ("unix:@fdkit-a-{pid}", "unix:@fdkit-b-{pid}"),
    ],
)
def test_an_upstream_beside_its_own_address_is_not_a_loop(
    tmp_path: Path, listen: str, up: str
) -> None:
    fill = {"port": free_port(), "other": closed_port(), "tmp": tmp_path, "pid": os.getpid()}
    with fdkit_proxy(tmp_path, listen.format(**fill), up.format(**fill)) as p:
        assert p.stop()[0] == 0
