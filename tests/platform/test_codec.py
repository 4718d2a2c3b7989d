"""The payload codec (AES-256-GCM under a key ring) and ``cloudloop codec-server``: pure parts,
and the server over real HTTP on loopback (no Temporal: it holds no connection to one)."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.exceptions import ApplicationError

from cloudloop import codec
from cloudloop.codec_server import CodecServer, build_guard
from cloudloop.settings import CodecServerSettings, CodecSettings

PLAIN = Payload(metadata={"encoding": b"json/plain"}, data=b'{"service":"ns/web"}')


@pytest.fixture
def ring() -> codec.KeyRing:
    return codec.KeyRing.generate("k1")


def test_a_payload_is_encrypted_whole_and_decrypts_back(ring: codec.KeyRing) -> None:
    sealed = ring.encrypt(PLAIN)
    assert sealed.metadata["encoding"] == codec.ENCODING
    assert sealed.metadata[codec.KEY_ID] == b"k1"
    assert b"ns/web" not in sealed.SerializeToString() and b"json/plain" not in sealed.data
    assert ring.encrypt(PLAIN).data != sealed.data  # a fresh nonce each time
    assert ring.decrypt(sealed) == PLAIN
    assert ring.decrypt(PLAIN) is PLAIN  # written before the codec was on: as it is


def test_an_unknown_key_or_a_changed_payload_is_a_clear_error(ring: codec.KeyRing) -> None:
    other = codec.KeyRing.generate("k2")
    with pytest.raises(codec.CodecError, match=r"^payload encrypted with key 'k1', which is not"):
        other.decrypt(ring.encrypt(PLAIN))
    tampered = ring.encrypt(PLAIN)
    tampered.data = tampered.data[:-1] + bytes([tampered.data[-1] ^ 1])
    with pytest.raises(codec.CodecError, match="does not authenticate"):
        ring.decrypt(tampered)
    assert "k1" in repr(ring) and base64.b64encode(ring.keys["k1"]).decode() not in repr(ring)


def write(folder: Path, name: str, content: bytes) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(content)


def test_the_key_ring_is_read_from_a_secret_directory(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    codec.write_key(keys, "2026-a")
    codec.write_key(keys, "2026-b")
    (keys / "..data").mkdir()  # a Secret volume's links are skipped
    assert oct((keys / "2026-a").stat().st_mode & 0o777) == "0o600"
    ring = codec.read_key_ring(keys, "2026-b")
    assert set(ring.keys) == {"2026-a", "2026-b"} and ring.active == "2026-b"
    old = codec.KeyRing({"2026-a": ring.keys["2026-a"]}, "2026-a").encrypt(PLAIN)
    assert ring.decrypt(old) == PLAIN  # rotation: the old key still decrypts
    assert ring.encrypt(PLAIN).metadata[codec.KEY_ID] == b"2026-b"


@pytest.mark.parametrize(
    ("files", "active", "error"),
    [
        pytest.param({}, "", "holds no key", id="empty"),
        pytest.param({"a": b"not base64!"}, "", "a: not base64", id="not-base64"),
        pytest.param({"a": base64.b64encode(b"x" * 16)}, "", "16 bytes, not 32", id="short"),
        pytest.param({"a": base64.b64encode(b"x" * 32), "b": base64.b64encode(b"y" * 32)}, "",
                     "name the active one", id="several-no-active"),
        pytest.param({"a": base64.b64encode(b"x" * 32)}, "z", "active codec key 'z' is not",
                     id="unknown-active"),
        pytest.param({"bad name": base64.b64encode(b"x" * 32)}, "", "not a key id", id="bad-id"),
    ],
)  # fmt: skip
def test_bad_keys_are_refused_by_name(
    tmp_path: Path, files: dict[str, bytes], active: str, error: str
) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    for name, content in files.items():
        write(keys, name, content)
    with pytest.raises(codec.CodecConfigError, match=error) as refused:
        codec.read_key_ring(keys, active)
    for content in files.values():
        assert content.decode(errors="replace") not in str(refused.value)


def test_the_codec_is_on_by_default_and_refuses_to_run_without_a_key() -> None:
    assert CodecSettings().enabled
    with pytest.raises(codec.CodecConfigError, match="CLOUDLOOP_TEMPORAL__CODEC__KEY_DIR"):
        codec.key_ring(CodecSettings())
    assert codec.key_ring(CodecSettings(enabled=False)) is None


def test_a_worker_without_its_key_stops_at_start_with_a_clear_error(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CLOUDLOOP_")},
        "CLOUDLOOP_PROVIDER": "aws",
    }
    for command in ("worker", "starter", "csi-controller", "codec-server"):
        done = subprocess.run(
            [sys.executable, "-m", "cloudloop.cli", command],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1, (command, done.stderr)
        assert "no key is configured" in done.stderr and "Traceback" not in done.stderr


async def test_failure_texts_are_encrypted_and_decode_back(ring: codec.KeyRing) -> None:
    converter = codec.data_converter(ring)
    failure = Failure()
    error = ApplicationError("LB of ns/web on i-0123 refused", {"node": "n1"}, type="Bad")
    await converter.encode_failure(error, failure)
    stored = failure.SerializeToString()
    assert b"ns/web" not in stored and b"i-0123" not in stored and b"n1" not in stored
    back = await converter.decode_failure(failure)
    assert isinstance(back, ApplicationError)
    assert back.message == "LB of ns/web on i-0123 refused" and back.type == "Bad"
    assert list(back.details) == [{"node": "n1"}]


# -- the codec server -----------------------------------------------------------------------
UI = "https://temporal.example.com"


@pytest.fixture
def server(ring: codec.KeyRing, tmp_path: Path) -> Iterator[str]:
    tokens = tmp_path / "tokens"
    tokens.write_text("good-token\n")
    settings = CodecServerSettings(
        bind="127.0.0.1", port=0, cors_origins=[UI], tokens_file=tokens, max_body_bytes=4096
    )
    running = CodecServer(
        ring, settings, namespace="prod", guard=build_guard(settings, None)
    ).start()
    try:
        yield f"http://127.0.0.1:{running.port}"
    finally:
        running.stop()


def post(
    url: str, body: bytes, headers: dict[str, str] | None = None, method: str = "POST"
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def document(*payloads: Payload) -> bytes:
    return json.dumps({"payloads": [json_format.MessageToDict(p) for p in payloads]}).encode()


GOOD = {"Authorization": "Bearer good-token", "X-Namespace": "prod", "Origin": UI}


def test_the_server_decodes_and_encodes_with_cors_for_the_ui(
    server: str, ring: codec.KeyRing, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="cloudloop.codec_server"):
        status, headers, body = post(f"{server}/decode", document(ring.encrypt(PLAIN)), GOOD)
    assert status == 200 and headers["Access-Control-Allow-Origin"] == UI
    [decoded] = json.loads(body)["payloads"]
    assert json_format.ParseDict(decoded, Payload()) == PLAIN
    assert "payloads=1" in caplog.text and "ns/web" not in caplog.text
    assert "good-token" not in caplog.text

    status, _, body = post(f"{server}/api/codec/encode", document(PLAIN), GOOD)  # any prefix
    [sealed] = json.loads(body)["payloads"]
    assert status == 200 and ring.decrypt(json_format.ParseDict(sealed, Payload())) == PLAIN


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param({}, 401, id="no-token"),
        pytest.param({"Authorization": "Basic Zm9vOmJhcg=="}, 401, id="not-bearer"),
        pytest.param({"Authorization": "Bearer good-token-but-longer"}, 403, id="wrong-token"),
        pytest.param({"Authorization": "Bearer good-token", "X-Namespace": "dev"}, 403,
                     id="other-namespace"),
    ],
)  # fmt: skip
def test_the_server_refuses_without_authorization(
    server: str, ring: codec.KeyRing, headers: dict[str, str], status: int
) -> None:
    got, answer_headers, body = post(
        f"{server}/decode", document(ring.encrypt(PLAIN)), {**headers, "Origin": UI}
    )
    assert got == status
    assert answer_headers["Access-Control-Allow-Origin"] == UI  # the UI can show the refusal
    assert b"ns/web" not in body


def test_the_server_answers_the_preflight_of_its_origin_only(server: str) -> None:
    preflight = {"Origin": UI, "Access-Control-Request-Method": "POST"}
    status, headers, _ = post(f"{server}/decode", b"", preflight, method="OPTIONS")
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == UI
    assert headers["Access-Control-Allow-Credentials"] == "true"
    assert "POST" in headers["Access-Control-Allow-Methods"]
    assert headers["Access-Control-Allow-Headers"] == "Content-Type, X-Namespace, Authorization"
    other = {**preflight, "Origin": "https://evil.example"}
    status, headers, _ = post(f"{server}/decode", b"", other, method="OPTIONS")
    assert status == 403 and "Access-Control-Allow-Origin" not in headers


def test_the_server_limits_and_checks_bodies(server: str, ring: codec.KeyRing) -> None:
    assert post(f"{server}/decode", b"x" * 5000, GOOD)[0] == 413
    assert post(f"{server}/decode", b"not json", GOOD)[0] == 400
    other = codec.KeyRing.generate("gone").encrypt(PLAIN)
    status, _, body = post(f"{server}/decode", document(other), GOOD)
    assert status == 400 and b"'gone'" in body
    assert post(f"{server}/other", document(PLAIN), GOOD)[0] == 404


def test_a_server_without_an_authorization_check_refuses_to_start() -> None:
    with pytest.raises(codec.CodecConfigError, match="needs an authorization check"):
        build_guard(CodecServerSettings(), None)
    assert build_guard(CodecServerSettings(insecure_no_authorization=True), None) is None
