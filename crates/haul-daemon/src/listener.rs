//! The daemon's pages on its status listener ([`haul_status::StatusListener`]:
//! HTTP/1.1, 127.0.0.1 by default): `/metrics` (Prometheus text), `/status`
//! (JSON), `/healthz`, the console at `/` (`crate::console`), and `POST
//! /act` — an operator's action ([`crate::control`]), for the console's
//! token only (`haul_status::console::ConsoleKey`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haul_catalog::{Catalog, SourceTotals};
use haul_status::console::{self, form_value, ConsoleKey, Via};
use haul_status::{Asked, Method, Page, Routes};
use tokio::sync::{mpsc, oneshot};

use crate::console::{View, FAILED_SHOWN};
use crate::control::{Action, Answer};
use crate::metrics::prometheus_text;
use crate::run::blocking;
use crate::status::{Board, SiteRow, Snapshot};
use crate::Command;

/// How long an action may take, its catalog part and the daemon's loop's
/// answer together (well inside the listener's exchange timeout).
pub const ACT_TIMEOUT: Duration = Duration::from_secs(20);
/// Runs the console lists.
const RUNS_SHOWN: u32 = 15;
/// Notices kept for the page a browser is sent to after an action.
const NOTICES_KEPT: usize = 32;

/// The last notice's number, and the kept ones: (number, text, went well).
type Notices = (u64, VecDeque<(u64, String, bool)>);

/// The daemon's pages: its sources' live state and its catalog's totals.
pub struct DaemonRoutes {
    board: Arc<Board>,
    catalog: Arc<dyn Catalog>,
    commands: mpsc::Sender<Command>,
    key: ConsoleKey,
    /// The answers to recent actions, by number: a browser is sent to
    /// `/?said=N` and sees the answer, and no text from a URL is ever shown.
    notices: Mutex<Notices>,
}

impl DaemonRoutes {
    /// The pages of the daemon whose live state is `board`, whose loop
    /// takes `commands`, whose actions need `key`.
    pub fn new(
        board: Arc<Board>,
        catalog: Arc<dyn Catalog>,
        commands: mpsc::Sender<Command>,
        key: ConsoleKey,
    ) -> Self {
        Self {
            board,
            catalog,
            commands,
            key,
            notices: Mutex::new((0, VecDeque::new())),
        }
    }

    fn remember(&self, text: String, ok: bool) -> u64 {
        let mut n = self.notices.lock().unwrap_or_else(|e| e.into_inner());
        n.0 += 1;
        let id = n.0;
        n.1.push_back((id, text, ok));
        while n.1.len() > NOTICES_KEPT {
            n.1.pop_front();
        }
        id
    }

    fn notice(&self, asked: &Asked) -> Option<(String, bool)> {
        let said = form_value(asked.query.as_deref()?, "said")?;
        match said.as_str() {
            "unlocked" => return Some(("Unlocked: the buttons act now.".into(), true)),
            "bad-token" => return Some(("That is not the console's token.".into(), false)),
            _ => {}
        }
        let id: u64 = said.parse().ok()?;
        let n = self.notices.lock().unwrap_or_else(|e| e.into_inner());
        n.1.iter()
            .find(|(i, _, _)| *i == id)
            .map(|(_, t, ok)| (t.clone(), *ok))
    }

    /// Sends `action` to the daemon's loop and waits for its answer.
    /// Does a retry's catalog part here (the loop never waits on the
    /// catalog for an action), then sends `action` to the daemon's loop
    /// and waits for its answer; all of it within [`ACT_TIMEOUT`].
    async fn act(&self, action: Action) -> Answer {
        let work = async {
            let action = match action {
                Action::RetryFiles { source, .. } => {
                    let s = source.clone();
                    let due = blocking(&self.catalog, move |c| c.retry_files(&s))
                        .await
                        .map_err(|e| format!("{source}: the catalog refused: {e}"))?;
                    Action::RetryFiles { source, due }
                }
                Action::RetryDeliveries { source, site, .. } => {
                    let (s, t) = (source.clone(), site.clone());
                    let due = blocking(&self.catalog, move |c| c.retry_deliveries(&s, &t))
                        .await
                        .map_err(|e| format!("{source} → {site}: the catalog refused: {e}"))?;
                    Action::RetryDeliveries { source, site, due }
                }
                other => other,
            };
            let (tx, rx) = oneshot::channel();
            let gone = || "the daemon is stopping".to_owned();
            self.commands
                .send(Command::Act(action, tx))
                .await
                .map_err(|_| gone())?;
            rx.await.map_err(|_| gone())?
        };
        tokio::time::timeout(ACT_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| {
                Err("the daemon did not answer in time (a slow catalog?): look at the page before trying again".to_owned())
            })
    }

    /// `POST /act`: the form's `action`, `source` and `site`.
    async fn post_act(&self, asked: &Asked) -> Page {
        let via = match self.key.check(asked) {
            Ok(via) => via,
            Err(refusal) => return refusal.page(),
        };
        let body = String::from_utf8_lossy(&asked.body);
        let answer = match form_value(&body, "source") {
            None => Err("a source is needed (form field source)".to_owned()),
            Some(source) => {
                let verb = form_value(&body, "action").unwrap_or_default();
                match Action::from_form(&verb, source, form_value(&body, "site")) {
                    Ok(action) => self.act(action).await,
                    Err(e) => Err(e),
                }
            }
        };
        let wants_json = asked
            .header("accept")
            .is_some_and(|a| a.contains("application/json"));
        let browser = via == Via::Cookie;
        match answer {
            _ if wants_json => {
                let (ok, text) = match &answer {
                    Ok(t) => (true, t),
                    Err(t) => (false, t),
                };
                let mut page = Page::json(&serde_json::json!({ "ok": ok, "message": text }));
                page.status = if ok { 200 } else { 409 };
                page
            }
            Ok(text) if !browser => Page::text(200, format!("{text}\n")),
            Err(text) if !browser => Page::text(409, format!("{text}\n")),
            Ok(text) => Page::see_other(&format!("/?said={}", self.remember(text, true))),
            Err(text) => Page::see_other(&format!("/?said={}", self.remember(text, false))),
        }
    }

    async fn console(&self, asked: &Asked) -> Page {
        let snapshot = self.board.snapshot();
        let now = crate::unix(std::time::SystemTime::now());
        let catalog = &self.catalog;
        let runs = blocking(catalog, |c| c.runs(None, RUNS_SHOWN))
            .await
            .map_err(|e| e.to_string());
        let failed = blocking(catalog, |c| c.files(None, Some("failed"), FAILED_SHOWN))
            .await
            .map_err(|e| e.to_string());
        let view = View {
            totals: totals(catalog).await,
            sites: site_rows(catalog, &snapshot).await,
            per_minute: self.board.fetched_per_minute(now),
            snapshot,
            runs,
            failed,
            now,
            unlocked: self.key.unlocks(asked),
            notice: self.notice(asked),
        };
        crate::console::page(&view)
    }
}

async fn totals(catalog: &Arc<dyn Catalog>) -> Result<Vec<SourceTotals>, String> {
    blocking(catalog, |c| c.totals())
        .await
        .map_err(|e| e.to_string())
}

/// What each source owes each of its sites, from the catalog.
async fn site_rows(catalog: &Arc<dyn Catalog>, snap: &Snapshot) -> Result<Vec<SiteRow>, String> {
    let pairs: Vec<(String, String)> = snap
        .sources
        .iter()
        .flat_map(|(source, s)| s.sites.iter().map(|site| (source.clone(), site.clone())))
        .collect();
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    let now = crate::unix(std::time::SystemTime::now());
    blocking(catalog, move |c| {
        pairs
            .into_iter()
            .map(|(source, site)| {
                let totals = c.site_totals(&source, &site, now)?;
                Ok(SiteRow {
                    source,
                    site,
                    totals,
                })
            })
            .collect()
    })
    .await
    .map_err(|e| e.to_string())
}

#[async_trait::async_trait]
impl Routes for DaemonRoutes {
    fn tick(&self) {
        self.board.sample(crate::unix(std::time::SystemTime::now()));
    }

    async fn respond(&self, asked: Asked) -> Page {
        let (board, catalog) = (&self.board, &self.catalog);
        if let Some(page) = self.key.login(&asked) {
            return page;
        }
        if asked.method == Method::Post {
            return match asked.path.as_str() {
                "/act" => self.post_act(&asked).await,
                _ => Page::text(405, "POST /act, /login or /logout only\n")
                    .with_header("allow", "GET, HEAD"),
            };
        }
        if let Some(page) = console::asset(&asked.path) {
            return page;
        }
        match asked.path.as_str() {
            "/" => self.console(&asked).await,
            "/healthz" => match board.snapshot().catalog_error {
                None => Page::text(200, "ok\n"),
                Some(e) => Page::text(503, format!("degraded: the catalog refuses writes: {e}\n")),
            },
            "/metrics" => {
                let totals = totals(catalog).await;
                let snapshot = board.snapshot();
                let sites = site_rows(catalog, &snapshot).await;
                let now = crate::unix(std::time::SystemTime::now());
                Page::metrics(prometheus_text(
                    &snapshot,
                    totals.as_deref().ok(),
                    sites.as_deref().ok(),
                    now,
                ))
            }
            "/status" => {
                let snapshot = board.snapshot();
                let catalog_handle = catalog.clone();
                let catalog = match totals(catalog).await {
                    Ok(t) => serde_json::json!(t
                        .iter()
                        .map(|t| (
                            t.source.clone(),
                            serde_json::json!({
                                "files": t.by_state.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
                                "bytes_fetched": t.bytes_fetched,
                                "last_fetched": t.last_fetched,
                            })
                        ))
                        .collect::<serde_json::Map<_, _>>()),
                    Err(e) => serde_json::json!({ "error": e }),
                };
                let now = crate::unix(std::time::SystemTime::now());
                let deliveries = match site_rows(&catalog_handle, &snapshot).await {
                    Ok(rows) => {
                        serde_json::json!(rows.iter().map(|r| r.json(now)).collect::<Vec<_>>())
                    }
                    Err(e) => serde_json::json!({ "error": e }),
                };
                let body = serde_json::json!({
                    "worker": snapshot.worker,
                    "started": snapshot.started,
                    "sources": snapshot.sources,
                    "catalog": catalog,
                    "deliveries": deliveries,
                });
                Page::json(&body)
            }
            _ => Page::not_found(),
        }
    }
}
