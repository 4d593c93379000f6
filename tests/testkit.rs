//! The testkit against real `redis-server` processes: startup, faults, restarts, cleanup.

// clippy's test allowances cover `#[test]` fns only, not the helpers below.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::AsyncCommands as _;
use redis::aio::MultiplexedConnection;
use redquorum_testkit::{Cluster, Persistence, Server, ServerOptions, TestkitError};
use tokio::time::{Instant, sleep, timeout};

/// How long a live server may take to answer in these tests.
const ANSWER: Duration = Duration::from_secs(5);

/// A multiplexed connection to `url`.
async fn connect(url: &str) -> MultiplexedConnection {
    let client = redis::Client::open(url).unwrap();
    timeout(ANSWER, client.get_multiplexed_async_connection())
        .await
        .expect("connecting timed out")
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// `SET key value` on `url`.
async fn set(url: &str, key: &str, value: &str) {
    let mut conn = connect(url).await;
    timeout(ANSWER, conn.set::<_, _, ()>(key, value))
        .await
        .expect("SET timed out")
        .unwrap();
}

/// `GET key` on `url`.
async fn get(url: &str, key: &str) -> Option<String> {
    let mut conn = connect(url).await;
    timeout(ANSWER, conn.get(key))
        .await
        .expect("GET timed out")
        .unwrap()
}

/// Whether a process with this PID exists (a zombie counts: it must have been reaped).
fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits at most 2 s for the process to disappear; true if it did.
async fn gone_within_2s(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    for _ in 0..200 {
        if !process_exists(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            break;
        }
        sleep(Duration::from_millis(10)).await;
    }
    !process_exists(pid)
}

#[tokio::test]
async fn three_masters_start_and_each_answers_independently() {
    let cluster = Cluster::start(3).await.unwrap();
    assert_eq!(cluster.len(), 3);
    assert!(!cluster.is_empty());
    assert_eq!(cluster.servers().len(), 3);

    let urls = cluster.urls();
    let ports: HashSet<u16> = cluster.servers().iter().map(Server::port).collect();
    assert_eq!(ports.len(), 3, "ports must differ: {urls:?}");
    for (i, url) in urls.iter().enumerate() {
        let server = cluster.server(i);
        assert_eq!(url, &format!("redis://127.0.0.1:{}", server.port()));
        assert_eq!(server.url(), *url);
        assert!(server.is_running());
        assert!(!server.is_paused());
        assert_eq!(server.unix_url(), None);
        server.wait_ready().await.unwrap();
        set(url, "testkit:cluster", &format!("master-{i}")).await;
    }
    // Each master kept its own value: they are separate processes, not one shared store.
    for (i, url) in urls.iter().enumerate() {
        assert_eq!(
            get(url, "testkit:cluster").await,
            Some(format!("master-{i}"))
        );
    }
    let pids: HashSet<u32> = cluster.servers().iter().filter_map(Server::pid).collect();
    assert_eq!(pids.len(), 3);
}

#[tokio::test]
async fn an_empty_cluster_is_allowed() {
    let cluster = Cluster::start(0).await.unwrap();
    assert!(cluster.is_empty());
    assert!(cluster.urls().is_empty());
}

#[tokio::test]
async fn concurrent_clusters_get_distinct_ports() {
    let (a, b, c) = tokio::join!(Cluster::start(3), Cluster::start(3), Cluster::start(3));
    let clusters = [a.unwrap(), b.unwrap(), c.unwrap()];
    let ports: HashSet<u16> = clusters
        .iter()
        .flat_map(|cluster| cluster.servers().iter().map(Server::port))
        .collect();
    assert_eq!(ports.len(), 9);
    for cluster in &clusters {
        for url in cluster.urls() {
            set(&url, "testkit:concurrent", &url).await;
            assert_eq!(get(&url, "testkit:concurrent").await, Some(url.clone()));
        }
    }
}

#[tokio::test]
async fn kill_refuses_connections_and_clears_the_pid() {
    let mut server = Server::start(&ServerOptions::new()).await.unwrap();
    let pid = server.pid().unwrap();
    assert!(process_exists(pid));

    server.kill().unwrap();
    assert_eq!(server.pid(), None);
    assert!(!server.is_running());
    // Reaped, not left as a zombie.
    assert!(!process_exists(pid));
    let refused = tokio::net::TcpStream::connect(("127.0.0.1", server.port())).await;
    assert!(refused.is_err(), "a killed server accepted a connection");

    // Idempotent, and the other controls say what to do instead.
    server.kill().unwrap();
    assert!(matches!(
        server.pause(),
        Err(TestkitError::NotRunning { .. })
    ));
    assert!(matches!(
        server.resume(),
        Err(TestkitError::NotRunning { .. })
    ));
    let not_running = server.wait_ready().await.unwrap_err();
    assert!(matches!(not_running, TestkitError::NotRunning { .. }));
    assert!(
        not_running.to_string().contains("restart()"),
        "{not_running}"
    );
}

#[tokio::test]
async fn pause_freezes_the_server_and_resume_unfreezes_it() {
    let mut server = Server::start(&ServerOptions::new()).await.unwrap();
    let url = server.url();
    set(&url, "testkit:pause", "before").await;
    let mut conn = connect(&url).await;

    server.pause().unwrap();
    assert!(server.is_paused());
    assert!(server.is_running());
    let frozen = timeout(
        Duration::from_millis(200),
        conn.get::<_, Option<String>>("testkit:pause"),
    )
    .await;
    assert!(frozen.is_err(), "a paused server answered: {frozen:?}");
    assert!(matches!(
        server.wait_ready().await,
        Err(TestkitError::Paused { .. })
    ));

    server.resume().unwrap();
    assert!(!server.is_paused());
    server.wait_ready().await.unwrap();
    assert_eq!(get(&url, "testkit:pause").await.as_deref(), Some("before"));
}

#[tokio::test]
async fn kill_while_paused_ends_the_process_and_restart_recovers() {
    let mut server = Server::start(&ServerOptions::new()).await.unwrap();
    let pid = server.pid().unwrap();
    server.pause().unwrap();
    server.kill().unwrap();
    assert!(!server.is_paused());
    assert!(!process_exists(pid));

    server.restart(false).await.unwrap();
    assert!(server.is_running());
    set(&server.url(), "testkit:paused-kill", "back").await;
}

#[tokio::test]
async fn restart_without_data_wipes_even_an_append_only_file() {
    let options = ServerOptions::new().persistence(Persistence::AofAlways);
    let mut server = Server::start(&options).await.unwrap();
    let (port, pid) = (server.port(), server.pid().unwrap());
    set(&server.url(), "testkit:wiped", "v").await;

    server.restart(false).await.unwrap();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), Some(pid));
    assert!(!process_exists(pid));
    assert_eq!(get(&server.url(), "testkit:wiped").await, None);
}

#[tokio::test]
async fn restart_with_data_and_aof_always_keeps_every_acknowledged_write() {
    let options = ServerOptions::new().persistence(Persistence::AofAlways);
    let mut server = Server::start(&options).await.unwrap();
    let port = server.port();
    set(&server.url(), "testkit:kept", "v").await;

    server.restart(true).await.unwrap();
    assert_eq!(server.port(), port);
    assert_eq!(
        get(&server.url(), "testkit:kept").await.as_deref(),
        Some("v")
    );

    // Also when the server was frozen at the time of the crash.
    set(&server.url(), "testkit:kept-2", "w").await;
    server.pause().unwrap();
    server.restart(true).await.unwrap();
    assert!(!server.is_paused());
    assert_eq!(
        get(&server.url(), "testkit:kept-2").await.as_deref(),
        Some("w")
    );
}

#[tokio::test]
async fn restart_with_data_but_no_persistence_keeps_nothing() {
    let mut server = Server::start(&ServerOptions::new()).await.unwrap();
    set(&server.url(), "testkit:volatile", "v").await;
    server.restart(true).await.unwrap();
    assert_eq!(get(&server.url(), "testkit:volatile").await, None);
}

#[tokio::test]
async fn restart_with_data_restores_an_explicit_snapshot() {
    let mut server = Server::start(&ServerOptions::new()).await.unwrap();
    let url = server.url();
    set(&url, "testkit:saved", "v").await;
    let mut conn = connect(&url).await;
    redis::cmd("SAVE")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    set(&url, "testkit:unsaved", "w").await;
    assert!(server.dir().join("dump.rdb").exists());

    server.restart(true).await.unwrap();
    assert_eq!(get(&url, "testkit:saved").await.as_deref(), Some("v"));
    assert_eq!(get(&url, "testkit:unsaved").await, None);

    server.restart(false).await.unwrap();
    assert!(!server.dir().join("dump.rdb").exists());
    assert_eq!(get(&url, "testkit:saved").await, None);
}

#[tokio::test]
async fn a_password_is_required_and_the_url_carries_it() {
    // Characters that must be percent-encoded in a URL.
    let password = "p@ss:w rd/ü?&=#%";
    let server = Server::start(&ServerOptions::new().password(password))
        .await
        .unwrap();
    assert!(
        server.url().starts_with("redis://default:"),
        "{}",
        server.url()
    );

    let anonymous = format!("redis://127.0.0.1:{}", server.port());
    let denied = async {
        let mut conn = redis::Client::open(anonymous.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        conn.get::<_, Option<String>>("testkit:auth").await
    };
    let error = timeout(ANSWER, denied).await.unwrap().unwrap_err();
    assert!(
        error.code() == Some("NOAUTH") || error.to_string().contains("NOAUTH"),
        "expected NOAUTH, got {error}"
    );

    set(&server.url(), "testkit:auth", "ok").await;
    assert_eq!(
        get(&server.url(), "testkit:auth").await.as_deref(),
        Some("ok")
    );
}

#[tokio::test]
async fn the_unix_socket_url_reaches_the_same_server_across_restarts() {
    let mut server = Server::start(&ServerOptions::new().unix_socket(true))
        .await
        .unwrap();
    let unix = server.unix_url().unwrap();
    let socket = server.socket_path().unwrap();
    assert!(unix.starts_with("redis+unix:///"), "{unix}");
    assert!(socket.exists());
    assert!(socket.starts_with(server.dir()));

    set(&unix, "testkit:unix", "v").await;
    assert_eq!(
        get(&server.url(), "testkit:unix").await.as_deref(),
        Some("v")
    );

    server.restart(false).await.unwrap();
    assert_eq!(server.unix_url().as_deref(), Some(unix.as_str()));
    assert_eq!(get(&unix, "testkit:unix").await, None);
}

#[tokio::test]
async fn the_unix_socket_url_carries_the_password() {
    let server = Server::start(
        &ServerOptions::new()
            .unix_socket(true)
            .password("se cret&pass=x"),
    )
    .await
    .unwrap();
    let unix = server.unix_url().unwrap();
    assert!(unix.contains("?pass="), "{unix}");
    set(&unix, "testkit:unix-auth", "v").await;
    assert_eq!(get(&unix, "testkit:unix-auth").await.as_deref(), Some("v"));
}

#[tokio::test]
async fn drop_kills_and_reaps_the_process_and_removes_its_directory() {
    let server = Server::start(&ServerOptions::new().unix_socket(true))
        .await
        .unwrap();
    let pid = server.pid().unwrap();
    let dir: PathBuf = server.dir().to_owned();
    assert!(dir.join("redis.log").exists());
    drop(server);
    assert!(gone_within_2s(pid).await, "pid {pid} survived its Server");
    assert!(!dir.exists());
}

#[tokio::test]
async fn drop_of_a_paused_server_kills_it() {
    let mut server = Server::start(&ServerOptions::new()).await.unwrap();
    let pid = server.pid().unwrap();
    server.pause().unwrap();
    drop(server);
    assert!(
        gone_within_2s(pid).await,
        "paused pid {pid} survived its Server"
    );
}

#[tokio::test]
async fn drop_of_a_cluster_kills_every_master() {
    let cluster = Cluster::start(3).await.unwrap();
    let pids: Vec<u32> = cluster.servers().iter().filter_map(Server::pid).collect();
    assert_eq!(pids.len(), 3);
    drop(cluster);
    for pid in pids {
        assert!(gone_within_2s(pid).await, "pid {pid} survived its Cluster");
    }
}

#[tokio::test]
async fn a_panicking_test_still_kills_its_servers() {
    let (pid_tx, pid_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let server = Server::start(&ServerOptions::new()).await.unwrap();
        pid_tx.send(server.pid().unwrap()).unwrap();
        panic!("deliberate panic while a server is running");
    });
    let joined = task.await;
    assert!(joined.unwrap_err().is_panic());
    let pid = pid_rx.await.unwrap();
    assert!(gone_within_2s(pid).await, "pid {pid} survived a panic");
}

#[tokio::test]
async fn a_missing_binary_says_how_to_install_it() {
    let options = ServerOptions::new().binary("/nonexistent/redis-server");
    let error = Server::start(&options).await.unwrap_err();
    assert!(
        matches!(error, TestkitError::NotInstalled { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("apt-get install redis-server"),
        "{message}"
    );
    assert!(message.contains("REDIS_SERVER"), "{message}");
    assert!(message.contains("/nonexistent/redis-server"), "{message}");

    let error = Cluster::start_with(2, &options).await.unwrap_err();
    assert!(
        matches!(error, TestkitError::NotInstalled { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_rejected_argument_reports_the_servers_output() {
    let options = ServerOptions::new().arg("--no-such-directive").arg("x");
    let error = Server::start(&options).await.unwrap_err();
    assert!(matches!(error, TestkitError::Exited { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("no-such-directive"), "{message}");
    assert!(message.contains("Bad directive"), "{message}");
}

#[tokio::test]
async fn arguments_the_testkit_manages_are_refused() {
    for arg in ["--bind", "--port", "--requirepass", "--dir"] {
        let options = ServerOptions::new().arg(arg).arg("x");
        let error = Server::start(&options).await.unwrap_err();
        assert!(
            matches!(error, TestkitError::InvalidOption { .. }),
            "{arg}: {error:?}"
        );
        assert!(error.to_string().contains(arg), "{error}");
    }
    let error = Server::start(&ServerOptions::new().password(""))
        .await
        .unwrap_err();
    assert!(
        matches!(error, TestkitError::InvalidOption { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn extra_arguments_reach_the_server_and_debug_is_enabled() {
    let options = ServerOptions::new().arg("--maxmemory").arg("1mb");
    let server = Server::start(&options).await.unwrap();
    let mut conn = connect(&server.url()).await;
    let maxmemory: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(maxmemory, ["maxmemory", "1048576"]);
    let bind: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("bind")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(bind, ["bind", "127.0.0.1"]);
    // The chaos tests stall servers with DEBUG SLEEP.
    redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg(0)
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    assert!(!server.log().is_empty());
}

#[tokio::test]
async fn restart_waits_for_its_port_to_be_free_again() {
    let mut server = Server::start(&ServerOptions::new()).await.unwrap();
    let port = server.port();
    server.kill().unwrap();
    // Someone else holds the port for a while; the restart retries until it is free.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let release = tokio::spawn(async move {
        sleep(Duration::from_millis(300)).await;
        drop(squatter);
    });
    server.restart(false).await.unwrap();
    release.await.unwrap();
    assert_eq!(server.port(), port);
    set(&server.url(), "testkit:squatted", "v").await;
}

#[tokio::test]
async fn restart_on_a_port_held_for_good_fails_with_the_servers_log() {
    let mut server = Server::start(&ServerOptions::new()).await.unwrap();
    let port = server.port();
    server.kill().unwrap();
    let _squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let error = timeout(Duration::from_secs(30), server.restart(false))
        .await
        .expect("restart retried without bound")
        .unwrap_err();
    assert!(matches!(error, TestkitError::Exited { .. }), "{error:?}");
    assert!(
        error.to_string().contains("Address already in use"),
        "{error}"
    );
    assert!(!server.is_running());
}
