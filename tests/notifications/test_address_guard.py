"""Which webhook targets are refused (the SSRF guard), table-driven, with a fixed resolver."""

import pytest

from notifications.address_guard import UnsafeURL, check_url, is_public

RESOLVES = {
    "hooks.example.com": ["93.184.215.14"],
    "rebind.example.com": ["93.184.215.14", "127.0.0.1"],  # one internal address is enough
    "v6.example.com": ["2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
    "metadata.example.com": ["169.254.169.254"],
}


def resolver(host, port):
    if host in RESOLVES:
        return RESOLVES[host]
    if host.replace(".", "").isdigit() or ":" in host:
        return [host]
    raise OSError("Name or service not known")


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/services/T000/B000",
        "http://hooks.example.com:8080/x?y=1",
        "https://v6.example.com/",
        "https://93.184.215.14/",
    ],
)
def test_public_targets_pass(url):
    target = check_url(url, resolve=resolver)
    assert target.addresses


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:8000/", "non-public"),
        ("http://localhost/", "cannot be resolved"),  # the fixed resolver knows no localhost
        ("http://10.1.2.3/", "non-public"),
        ("http://172.16.0.1/", "non-public"),
        ("http://192.168.1.1/", "non-public"),
        ("http://169.254.169.254/latest/meta-data/", "non-public"),
        ("http://metadata.example.com/", "169.254.169.254"),
        ("http://rebind.example.com/", "127.0.0.1"),
        ("http://[::1]/", "non-public"),
        ("http://[fe80::1]/", "non-public"),
        ("http://[fd00::1]/", "non-public"),
        ("http://[::ffff:127.0.0.1]/", "non-public"),
        ("http://100.64.0.1/", "non-public"),  # carrier-grade NAT
        ("http://0.0.0.0/", "non-public"),
        ("http://224.0.0.1/", "non-public"),
        ("ftp://hooks.example.com/", "Only http"),
        ("file:///etc/passwd", "Only http"),
        ("gopher://hooks.example.com/", "Only http"),
        ("https:///nohost", "no host"),
        ("http://nowhere.invalid/", "cannot be resolved"),
        ("http://hooks.example.com:99999/", "valid URL"),
    ],
)
def test_internal_or_odd_targets_are_refused(url, words):
    with pytest.raises(UnsafeURL, match=words):
        check_url(url, resolve=resolver)


def test_staff_may_allow_internal_targets_but_not_other_schemes():
    assert check_url("http://127.0.0.1:8000/", allow_internal=True, resolve=resolver)
    with pytest.raises(UnsafeURL):
        check_url("file:///etc/passwd", allow_internal=True, resolve=resolver)


@pytest.mark.parametrize(
    ("address", "public"),
    [("8.8.8.8", True), ("127.0.0.2", False), ("::ffff:10.0.0.1", False), ("fe80::1%eth0", False)],
)
def test_is_public(address, public):
    assert is_public(address) is public
