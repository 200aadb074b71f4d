"""The data source's options: parsing, defaults, and errors that name the option."""

from __future__ import annotations

import pickle
import ssl
from pathlib import Path

import pytest
import trustme

from stompy.errors import ConfigurationError
from stompy.spark._options import (
    DEFAULT_PREFETCH_HEADERS,
    MAX_PREFETCH,
    PARALLELISM_VARIABLE,
    ConnectionSettings,
    parse_read_options,
    parse_write_options,
)

URL = "stomp://127.0.0.1:61613"


def read(**options: str) -> dict[str, str]:
    """Options as Spark hands them over: keys lower-cased."""
    return {k.lower(): v for k, v in {"url": URL, "destination": "/queue/a", **options}.items()}


def test_read_defaults() -> None:
    settings = parse_read_options(read())
    assert settings.destinations == ("/queue/a",)
    assert settings.max_messages_per_batch is None  # the broker decides: see below
    assert settings.batch_rows == 100_000
    assert settings.batch_window == 1000
    assert settings.max_messages_per_partition is None
    assert settings.mode == "consume"
    assert settings.num_partitions == 2
    assert settings.idle_timeout == 1.0
    # A streaming source rides out a broker restart of minutes by default.
    policy = parse_read_options(read(), streaming=True).reconnect
    assert policy is not None
    assert policy.max_attempts == 34
    assert (policy.initial_delay, policy.max_delay) == (0.5, 10.0)
    assert policy.send_timeout > 300
    assert parse_read_options(read(), streaming=False).reconnect is None
    conn = settings.connection
    assert conn.heartbeats == (10_000, 10_000)
    assert conn.tls is None
    assert conn.ssl_context() is None
    assert conn.where == "stomp://127.0.0.1:61613"


def test_num_partitions_defaults_to_what_the_session_runs_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the driver said when the source was registered (StompDataSource.name).
    monkeypatch.setenv(PARALLELISM_VARIABLE, "5")
    assert parse_read_options(read(), streaming=False).num_partitions == 5
    assert parse_read_options(read(), streaming=True).num_partitions == 5
    assert parse_read_options(read(numPartitions="3"), streaming=False).num_partitions == 3
    assert parse_read_options(read(mode="browse"), streaming=False).num_partitions == 1
    for unusable in ("0", "", "many"):
        monkeypatch.setenv(PARALLELISM_VARIABLE, unusable)
        assert parse_read_options(read(), streaming=False).num_partitions == 2


def test_keys_are_case_insensitive_and_values_keep_their_case() -> None:
    settings = parse_read_options(
        {
            "URL": URL,
            "Destination": "/queue/MiXed",
            "MAXMESSAGESPERBATCH": "7",
            "subscribeheaders": '{"Selector": "Kind = \'A\'"}',
        }
    )
    assert settings.destinations == ("/queue/MiXed",)
    assert settings.max_messages_per_batch == 7
    assert settings.subscribe_headers == (("Selector", "Kind = 'A'"),)


def test_stream_batches_are_as_large_as_the_brokers_prefetch_lets_them_pipeline() -> None:
    # One batch in Spark's hands and the next arriving: the prefetch is twice the batch.
    settings = parse_read_options(read(), streaming=True)
    assert settings.stream_limits("stompy/0.1.0") == (100_000, 200_000)
    assert settings.stream_limits("ActiveMQ/5.17.3") == (100_000, 200_000)
    assert settings.stream_limits(None) == (100_000, 200_000)  # no server header
    # RabbitMQ's prefetch-count is AMQP's 16-bit basic.qos field: the largest batch
    # whose prefetch fits in it.
    assert settings.stream_limits("RabbitMQ/3.10.8") == (32_000, 64_000)
    assert MAX_PREFETCH >= 64_000
    # What the user asks for holds everywhere; the prefetch stays within the limit.
    given = parse_read_options(read(maxMessagesPerBatch="50000"), streaming=True)
    assert given.batch_rows == 50_000
    assert given.stream_limits("stompy/0.1.0") == (50_000, 100_000)
    assert given.stream_limits("RabbitMQ/3.10.8") == (50_000, MAX_PREFETCH)
    fixed = parse_read_options(read(maxMessagesPerBatch="10", prefetch="15"), streaming=True)
    assert fixed.stream_limits("RabbitMQ/3.10.8") == fixed.stream_limits(None) == (10, 15)


def test_a_stream_waits_two_seconds_at_most_for_a_full_batch_unless_told() -> None:
    assert parse_read_options(read(), streaming=True).max_trigger_delay == 2.0
    never = parse_read_options(read(maxTriggerDelay="0"), streaming=True)
    assert never.max_trigger_delay == 0.0
    assert parse_read_options(read(maxTriggerDelay="0.5")).max_trigger_delay == 0.5


def test_subscribe_args_carry_prefetch_durable_and_extra_headers() -> None:
    settings = parse_read_options(
        read(
            prefetch="50",
            durableName="audit",
            subscribeHeaders='{"selector": "x = 1", "prefetch-count": "9"}',
        )
    )
    sub_id, headers = settings.subscribe_args(settings.stream_limits()[1], "/topic/t")
    assert sub_id == "audit"
    assert headers["activemq.prefetchSize"] == "50"
    assert headers["prefetch-count"] == "9"  # the explicit header wins
    assert headers["activemq.subscriptionName"] == "audit"
    assert headers["durable"] == "true"
    assert headers["selector"] == "x = 1"
    assert settings.batch_window == 50
    # The second destination's durable subscription needs a name of its own.
    sub_id, headers = settings.subscribe_args(5, "/topic/u", 1)
    assert sub_id == headers["activemq.subscriptionName"] == "audit-1"


def test_prefetch_headers_can_be_renamed() -> None:
    settings = parse_read_options(read(prefetchHeaders="x-prefetch, ,y"))
    assert settings.prefetch_headers == ("x-prefetch", "y")
    assert parse_read_options(read()).prefetch_headers == DEFAULT_PREFETCH_HEADERS
    sub_id, headers = settings.subscribe_args(3, "/queue/a")
    assert sub_id is None
    assert headers == {"x-prefetch": "3", "y": "3"}


def test_browse_mode_reads_with_one_task() -> None:
    settings = parse_read_options(read(mode="BROWSE"), streaming=False)
    assert settings.mode == "browse"
    assert settings.num_partitions == 1
    with pytest.raises(ConfigurationError, match="'numPartitions' must be 1 with mode=browse"):
        parse_read_options(read(mode="browse", numPartitions="4"), streaming=False)


@pytest.mark.parametrize(
    ("option", "streaming", "where"),
    [
        ("mode", True, "batch reads"),
        ("maxMessagesPerPartition", True, "batch reads"),
        ("maxMessagesPerBatch", False, "streaming reads"),
        ("maxTriggerDelay", False, "streaming reads"),
        ("reconnectAttempts", False, "streaming reads"),
        ("reconnectDelay", False, "streaming reads"),
        ("reconnectMaxDelay", False, "streaming reads"),
    ],
)
def test_an_option_of_the_other_kind_of_read_is_named(
    option: str, streaming: bool, where: str
) -> None:
    options = read(**{option: "browse" if option == "mode" else "2"})
    parse_read_options(options)  # fine when the kind of read is not known yet
    kind = "streaming read" if streaming else "batch read"
    with pytest.raises(
        ConfigurationError, match=rf"option '{option}' applies to {where} \(.*\), not to a {kind}"
    ):
        parse_read_options(options, streaming=streaming)


def test_several_destinations() -> None:
    settings = parse_read_options(read(destination=" /queue/a ,/topic/b"))
    assert settings.destinations == ("/queue/a", "/topic/b")
    with pytest.raises(ConfigurationError, match="empty name"):
        parse_read_options(read(destination="/queue/a,,/queue/b"))
    with pytest.raises(ConfigurationError, match="twice"):
        parse_read_options(read(destination="/queue/a,/queue/a"))


def test_reconnect_options() -> None:
    policy = parse_read_options(
        read(reconnectAttempts="3", reconnectDelay="0.2", reconnectMaxDelay="1"), streaming=True
    ).reconnect
    assert policy is not None
    assert (policy.max_attempts, policy.initial_delay, policy.max_delay) == (3, 0.2, 1.0)
    assert parse_read_options(read(reconnectAttempts="0"), streaming=True).reconnect is None
    with pytest.raises(ConfigurationError, match=r"'reconnectMaxDelay'.*below 'reconnectDelay'"):
        parse_read_options(read(reconnectDelay="5", reconnectMaxDelay="1"), streaming=True)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": URL}, "'destination'"),
        ({"destination": "/queue/a"}, "'url'"),
        ({"url": "http://x", "destination": "/q"}, "unsupported URL"),
        (read(maxMessagesPerBatch="lots"), "'maxMessagesPerBatch' must be an integer"),
        (read(maxMessagesPerBatch="0"), "at least 1"),
        (read(idleTimeout="-1"), "'idleTimeout' must be a positive number"),
        (read(idleTimeout="soon"), "'idleTimeout' must be a number"),
        (read(maxTriggerDelay="-1"), "'maxTriggerDelay' must be 0 or a positive number"),
        (read(maxTriggerDelay="nan"), "'maxTriggerDelay' must be 0 or a positive number"),
        (read(mode="peek"), "'mode' must be"),
        (read(heartbeats="often"), "'heartbeats'"),
        (read(versions="1.2,2.0"), "'versions'"),
        (read(tls="maybe"), "'tls' must be true or false"),
        (read(subscribeHeaders="{"), "JSON object"),
        (read(subscribeHeaders='{"a": 1}'), "string values"),
        (read(subscribeHeaders='["a"]'), "string values"),
        (read(destinaton="/queue/typo"), "unknown option.*destinaton"),
        (read(transactional="true"), "unknown option.*transactional"),
        (read(prefetch=str(MAX_PREFETCH + 1)), "'prefetch' must be at most 65535"),
        (read(reconnectDelay="0"), "'reconnectDelay' must be a positive number"),
    ],
)
def test_bad_read_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_read_options({k.lower(): v for k, v in options.items()})


def test_spark_keys_are_ignored() -> None:
    settings = parse_read_options(read(path="/ignored", checkpointLocation="/tmp/x"))
    assert settings.destinations == ("/queue/a",)


def test_the_passcode_never_shows() -> None:
    secret = "hunter2-passcode"
    settings = parse_read_options(read(login="app", passcode=secret))
    assert settings.connection.passcode == secret
    assert secret not in repr(settings)
    from_url = parse_read_options(read(url=f"stomp://app:{secret}@127.0.0.1:1"))
    assert secret not in repr(from_url)
    assert secret not in from_url.connection.where
    with pytest.raises(ValueError, match="unsupported URL") as info:
        parse_read_options(read(url=f"http://app:{secret}@127.0.0.1:1"))
    assert secret not in str(info.value)
    with pytest.raises(ValueError, match="bogus") as info:
        parse_read_options(read(passcode=secret, bogus="1"))
    assert secret not in str(info.value)


def test_settings_pickle() -> None:
    settings = parse_read_options(read(passcode="p", tlsVerify="false"))
    assert pickle.loads(pickle.dumps(settings)) == settings


def test_write_options() -> None:
    settings = parse_write_options(
        {
            "url": URL,
            "destination": " /queue/out ",
            "transactional": "yes",
            "dedupheader": "_AMQ_DUPL_ID",
            "sendheaders": '{"persistent": "true"}',
        }
    )
    assert settings.destination == "/queue/out"
    assert settings.transactional is True
    assert settings.dedup_header == "_AMQ_DUPL_ID"
    assert settings.send_headers == (("persistent", "true"),)
    bare = parse_write_options({"url": URL})
    assert bare.destination is None
    assert bare.transactional is False
    assert bare.dedup_header == "stompy-dedup-id"
    assert parse_write_options({"url": URL, "dedupheader": ""}).dedup_header == ""


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": URL, "transactional": "perhaps"}, "'transactional'"),
        ({"url": URL, "maxmessagesperbatch": "5"}, "unknown option"),
        ({"url": URL, "receipttimeout": "0"}, "'receiptTimeout'"),
        ({"url": "stomp+ssl://127.0.0.1", "tls": "false"}, "needs TLS"),
    ],
)
def test_bad_write_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_write_options(options)


def test_connection_options_reach_the_connection() -> None:
    settings = parse_write_options(
        {
            "url": "stomp://127.0.0.1:1,stomp://127.0.0.1:2",
            "login": "app",
            "passcode": "pw",
            "host": "/vhost",
            "heartbeats": "0,5000",
            "versions": "1.1,1.2",
            "connecttimeout": "2.5",
            "receipttimeout": "7",
            "clientid": "job-1",
        }
    ).connection
    assert settings.heartbeats == (0, 5000)
    assert settings.versions == ("1.1", "1.2")
    assert settings.where == "stomp://127.0.0.1:1, stomp://127.0.0.1:2"
    conn = settings.connection(max_pending=5)
    options = conn._options
    assert len(options.endpoints) == 2
    assert options.credentials(options.endpoints[0]) == ("app", "pw")
    assert options.vhost(options.endpoints[0]) == "/vhost"
    assert options.heartbeats == (0, 5000)
    assert options.connect_timeout == 2.5
    assert options.receipt_timeout == 7.0
    assert options.headers == {"client-id": "job-1"}
    assert options.max_pending == 5
    conn.close()


def test_tls_contexts(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert = ca.issue_cert("client.example")
    cert_file = tmp_path / "client.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))

    def context(**options: str) -> object:
        return parse_write_options({"url": URL, **options}).connection.ssl_context()

    assert context(tls="true") is True
    assert context(tls="false") is False
    trusting = context(tlsCaFile=str(ca_file), tlsCertFile=str(cert_file))
    assert isinstance(trusting, ssl.SSLContext)
    assert trusting.verify_mode == ssl.CERT_REQUIRED
    assert len(trusting.get_ca_certs()) == 1  # the test CA, and only it
    lax = context(tlsVerify="false")
    assert isinstance(lax, ssl.SSLContext)
    assert lax.verify_mode == ssl.CERT_NONE
    assert not lax.check_hostname
    assert context(tls="false", tlsVerify="false") is False


def test_connection_settings_repr_is_safe() -> None:
    settings = ConnectionSettings(url="stomp://u:topsecret@h", passcode="alsosecret")
    assert "secret" not in repr(settings)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (read(versions="1.2,2.0"), r"'versions' must list .*, got '1\.2,2\.0'"),
        (read(login="app\nroot"), "connection options cannot be used: .*'login'"),
        (read(clientId="job\n1"), "connection options cannot be used: .*'client-id'"),
        (read(tlsKeyFile="/keys/client.key"), "'tlsKeyFile' needs 'tlsCertFile'"),
        (read(idleTimeout="1e12"), r"'idleTimeout' must be a positive number of seconds \(at most"),
        (read(connectTimeout="1e12"), "'connectTimeout' must be a positive number"),
    ],
)
def test_what_the_worker_would_refuse_is_refused_on_the_driver(
    options: dict[str, str], message: str
) -> None:
    """A value the Connection made in a Spark task would refuse fails the read where it
    is defined, naming the option and the value, not in every task."""
    for streaming in (None, False, True):
        with pytest.raises(ConfigurationError, match=message):
            parse_read_options({k.lower(): v for k, v in options.items()}, streaming=streaming)
    secret = "pass\nword"
    with pytest.raises(ConfigurationError) as info:
        parse_write_options({"url": URL, "passcode": secret})
    assert secret not in str(info.value)
