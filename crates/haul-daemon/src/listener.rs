//! The daemon's pages on its status listener ([`haul_status::StatusListener`]:
//! HTTP/1.1, read only, 127.0.0.1 by default): `/metrics` (Prometheus
//! text), `/status` (JSON), `/healthz`.

use std::sync::Arc;

use haul_catalog::{Catalog, SourceTotals};
use haul_status::{Asked, Page, Routes};

use crate::metrics::prometheus_text;
use crate::run::blocking;
use crate::status::{Board, SiteRow, Snapshot};

/// The daemon's pages: its sources' live state and its catalog's totals.
pub struct DaemonRoutes {
    /// The sources' live state.
    pub board: Arc<Board>,
    /// The catalog its totals come from.
    pub catalog: Arc<dyn Catalog>,
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
    async fn respond(&self, asked: Asked) -> Page {
        let (board, catalog) = (&self.board, &self.catalog);
        match asked.path.as_str() {
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
