//! A real S3 server for tests: `moto_server` (Python moto, `pip install
//! 'moto[server]'`) as a child process on `127.0.0.1` and a free port.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use haul_s3::testserver::MotoServer;
//! let moto = MotoServer::start_with_auth().await?;
//! moto.create_bucket("data").await?;
//! moto.put_object("data", "dir/a.txt", b"hello").await?;
//! let url = haul_remote::RemoteUrl::parse("s3://data/dir/").unwrap();
//! let remote = haul_s3::open_with_credentials(&url, &moto.options(), Some(moto.credentials()));
//! // or, for a `haul` child process: Command::new(..).envs(moto.env()) with `--s3-endpoint`.
//! # Ok(()) }
//! ```
//!
//! - [`MotoServer::start`]: moto as it comes, which accepts ANY credentials
//!   (signatures are not checked). Use [`MotoServer::credentials`] anyway.
//! - [`MotoServer::start_with_auth`]: moto checks SigV4 signatures and keys.
//!   moto only does so once its IAM knows the key: at start the server
//!   creates IAM user `haul` with an allow-all policy and an access key
//!   (moto picks the key, so read it from `credentials()`), then turns
//!   authentication on (`POST /moto-api/reset-auth` with `0`, the same as
//!   `INITIAL_NO_AUTH_ACTION_COUNT=0`). moto checks only header-signed
//!   requests (`Authorization:`), which is what haul-s3 sends. moto 5.2's
//!   check recomputes the signature wrongly for keys holding `+`, `=`,
//!   `,;:@!'()*` or non-ASCII characters (requests signed by botocore fail
//!   the same way), and for any query with a `/` in it (so ListObjectsV2 with
//!   `delimiter=/` or a prefix with `/`, which stat of a missing key uses):
//!   with auth on, use plain keys (letters, digits, ` -_.~/`) and object
//!   requests only; test listings on a server without auth.
//! - moto keeps everything in memory: after [`MotoServer::stop`] +
//!   [`MotoServer::start_again`] (same port) the server is EMPTY, and with
//!   auth the access key is a new one.
//! - moto logs every request line (`"GET /bucket/?list-type=2&... HTTP/1.1" 200`)
//!   on stderr; [`MotoServer::requests_matching`] counts them.
//! - Drop kills the child and waits for it.

use std::io::{self, BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use haul_remote::{RemoteOptions, Secret};
use reqwest::Method;

use crate::{S3Credentials, S3Remote};

/// Access key id used with a moto started without auth.
pub const TEST_ACCESS_KEY_ID: &str = "AKIAHAULTESTKEY00001";
/// Secret key used with a moto started without auth.
pub const TEST_SECRET_ACCESS_KEY: &str = "haul-test-secret-key";
/// Region the test server is used with.
pub const REGION: &str = "us-east-1";

/// A running moto_server child process.
pub struct MotoServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    log: Arc<Mutex<Vec<String>>>,
    auth: bool,
    creds: S3Credentials,
}

fn err(msg: String) -> io::Error {
    io::Error::other(msg)
}

fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn tag<'a>(xml: &'a str, t: &str) -> Option<&'a str> {
    let open = format!("<{t}>");
    let s = xml.find(&open)? + open.len();
    Some(&xml[s..s + xml[s..].find(&format!("</{t}>"))?])
}

impl MotoServer {
    /// Starts moto without authentication (any credentials work).
    pub async fn start() -> io::Result<Self> {
        Self::launch(false).await
    }

    /// Starts moto with SigV4 authentication on (see the module docs).
    pub async fn start_with_auth() -> io::Result<Self> {
        Self::launch(true).await
    }

    async fn launch(auth: bool) -> io::Result<Self> {
        let mut s = Self {
            child: None,
            port: free_port()?,
            dir: tempfile::tempdir()?,
            log: Arc::new(Mutex::new(Vec::new())),
            auth,
            creds: S3Credentials::new(TEST_ACCESS_KEY_ID, Secret::new(TEST_SECRET_ACCESS_KEY)),
        };
        s.start_again().await?;
        Ok(s)
    }

    /// The endpoint URL (`http://127.0.0.1:PORT`).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port moto listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Credentials moto accepts.
    pub fn credentials(&self) -> S3Credentials {
        self.creds.clone()
    }

    /// Options pointing at this server: endpoint, region, path-style, 10 s timeout.
    pub fn options(&self) -> RemoteOptions {
        RemoteOptions {
            timeout: Duration::from_secs(10),
            s3_endpoint: Some(self.endpoint()),
            s3_region: Some(REGION.into()),
            s3_path_style: true,
            ..RemoteOptions::default()
        }
    }

    /// Environment for a child process (`haul`) to reach this server with
    /// `open`: credentials, region and `AWS_ENDPOINT_URL_S3`.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", self.creds.access_key_id.clone()),
            (
                "AWS_SECRET_ACCESS_KEY",
                self.creds.secret_access_key.expose().to_string(),
            ),
            ("AWS_REGION", REGION.into()),
            ("AWS_ENDPOINT_URL_S3", self.endpoint()),
        ]
    }

    /// How many request lines moto logged that contain `needle`, e.g.
    /// `"GET /mybucket/?continuation-token="` (query parameters are sorted).
    pub fn requests_matching(&self, needle: &str) -> usize {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.iter().filter(|l| l.contains(needle)).count()
    }

    /// [`requests_matching`](Self::requests_matching), waiting up to
    /// `within` for at least `n` lines: moto logs a request after it has
    /// answered it, so a client can see the answer before the log line.
    pub fn requests_at_least(&self, needle: &str, n: usize, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let seen = self.requests_matching(needle);
            if seen >= n || Instant::now() >= deadline {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Creates a bucket.
    pub async fn create_bucket(&self, bucket: &str) -> io::Result<()> {
        self.request(bucket, Method::PUT, "", Vec::new(), Some(Vec::new()))
            .await
            .map(|_| ())
    }

    /// Puts an object; returns its ETag (with quotes).
    pub async fn put_object(&self, bucket: &str, key: &str, data: &[u8]) -> io::Result<String> {
        self.request(bucket, Method::PUT, key, Vec::new(), Some(data.to_vec()))
            .await
    }

    /// Puts an object with `x-amz-checksum-sha256` (and
    /// `x-amz-sdk-checksum-algorithm: SHA256`): moto stores it (without
    /// verifying it) and returns it from HEAD with `x-amz-checksum-mode: ENABLED`.
    pub async fn put_object_with_sha256(
        &self,
        bucket: &str,
        key: &str,
        data: &[u8],
    ) -> io::Result<String> {
        use base64::Engine;
        use sha2::Digest;
        let sum = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(data));
        // moto only stores it with the algorithm named, as SDKs send it.
        let h = vec![
            ("x-amz-checksum-sha256".to_string(), sum),
            (
                "x-amz-sdk-checksum-algorithm".to_string(),
                "SHA256".to_string(),
            ),
        ];
        self.request(bucket, Method::PUT, key, h, Some(data.to_vec()))
            .await
    }

    async fn request(
        &self,
        bucket: &str,
        method: Method,
        key: &str,
        headers: Vec<(String, String)>,
        body: Option<Vec<u8>>,
    ) -> io::Result<String> {
        let url = haul_remote::RemoteUrl::parse(&format!("s3://{bucket}/"))
            .map_err(|e| err(e.to_string()))?;
        let r = S3Remote::new(
            bucket.into(),
            url.path,
            url::Url::parse(&self.endpoint()).map_err(|e| err(e.to_string()))?,
            true,
            REGION.into(),
            Some(self.creds.clone()),
            &self.options(),
        )
        .map_err(|e| err(e.to_string()))?;
        let (status, etag, text) = r
            .raw_request(method, key, headers, body)
            .await
            .map_err(|e| err(e.to_string()))?;
        if !(200..300).contains(&status) {
            return Err(err(format!(
                "moto answered {status} to a PUT of {bucket}/{key}: {text}"
            )));
        }
        Ok(etag.unwrap_or_default())
    }

    /// Stops moto (kills the child and waits for it). Idempotent.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts moto again on the same port (after [`MotoServer::stop`]); it
    /// starts EMPTY (moto keeps data in memory), and with auth the access
    /// key changes: read [`MotoServer::credentials`] again.
    pub async fn start_again(&mut self) -> io::Result<()> {
        self.stop();
        let mut child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .current_dir(self.dir.path())
            .env("HOME", self.dir.path())
            .env_remove("INITIAL_NO_AUTH_ACTION_COUNT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                err(format!(
                    "cannot run moto_server (pip install 'moto[server]'): {e}"
                ))
            })?;
        if let Some(stderr) = child.stderr.take() {
            let log = self.log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
                    if l.len() < 1_000_000 {
                        l.push(line);
                    }
                }
            });
        }
        self.child = Some(child);
        let http = haul_http::client_builder()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| err(e.to_string()))?;
        let base = self.endpoint();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if http.get(format!("{base}/moto-api/")).send().await.is_ok() {
                break;
            }
            if let Some(c) = self.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    let tail = self.log.lock().map(|l| l.join("\n")).unwrap_or_default();
                    return Err(err(format!("moto_server exited ({status}):\n{tail}")));
                }
            }
            if Instant::now() > deadline {
                return Err(err("moto_server did not answer within 60 s".into()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if self.auth {
            self.enable_auth(&http).await?;
        }
        Ok(())
    }

    async fn enable_auth(&mut self, http: &reqwest::Client) -> io::Result<()> {
        let base = self.endpoint();
        // moto routes by the credential scope's service; it checks nothing yet.
        let iam = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20200101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0";
        let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}"#;
        let calls: [&[(&str, &str)]; 3] = [
            &[("Action", "CreateUser"), ("UserName", "haul")],
            &[
                ("Action", "PutUserPolicy"),
                ("UserName", "haul"),
                ("PolicyName", "all"),
                ("PolicyDocument", policy),
            ],
            &[("Action", "CreateAccessKey"), ("UserName", "haul")],
        ];
        let mut last = String::new();
        for form in calls {
            let mut body = crate::sigv4::canonical_query(form);
            body.push_str("&Version=2010-05-08");
            let resp = http
                .post(format!("{base}/"))
                .header("authorization", iam)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .map_err(|e| err(format!("moto IAM: {e}")))?;
            let ok = resp.status().is_success();
            last = resp
                .text()
                .await
                .map_err(|e| err(format!("moto IAM: {e}")))?;
            if !ok {
                return Err(err(format!("moto IAM refused {form:?}: {last}")));
            }
        }
        let (Some(id), Some(secret)) = (tag(&last, "AccessKeyId"), tag(&last, "SecretAccessKey"))
        else {
            return Err(err(format!("moto IAM: no access key in {last}")));
        };
        self.creds = S3Credentials::new(id, Secret::new(secret));
        let resp = http
            .post(format!("{base}/moto-api/reset-auth"))
            .header("content-type", "text/plain")
            .body("0")
            .send()
            .await
            .map_err(|e| err(format!("moto reset-auth: {e}")))?;
        if !resp.status().is_success() {
            return Err(err(format!("moto reset-auth answered {}", resp.status())));
        }
        Ok(())
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        self.stop();
    }
}
