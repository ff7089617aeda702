//! `diag-alerts`: alerts in, a verified diagnosis per alert group out
//! (openspec/specs/alerts/spec.md). Alertmanager's API v2 read ([`alertmanager`]), one
//! alert group investigated through the ask service with its alerts kept beside the run
//! ([`investigate`]), the groups of `diag investigate` ([`batch`]), and where a result goes
//! besides the store: a generic webhook ([`notify`]), and `diag serve`, Alertmanager's webhook
//! receiver with its workers ([`serve`]) and its queue as `diag serve status` shows it
//! ([`status`]). The configuration's `[notify]` and `[serve]`, with their defaults, are this
//! crate's ([`config`]), and so are the tokens and link key they name ([`secrets`]). The alerts themselves are plain data in `diag_core::alert`; the queue
//! of `diag serve` is the run store's (`diag_core::store::alerts`).

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod alertmanager;
pub mod batch;
pub mod config;
pub mod investigate;
pub mod links;
pub mod notify;
pub mod secrets;
pub mod serve;
pub mod status;
