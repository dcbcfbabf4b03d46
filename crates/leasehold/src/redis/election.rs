//! Leader election on top of a lock ([`Locker::election`](crate::Locker::election)).
//!
//! Leadership of `name` is the lock `name`, held with auto-extension: a campaign waits for the
//! lock; the **term** is the lock's fencing number, drawn in the same script that takes the
//! lock, which also records `term id` in [`election_leader_key`] and announces the new leader on
//! `name`'s release channel. Resigning is releasing the guard; a leader that crashes stops
//! renewing and its lease expires after one TTL, when a waiting candidate takes over (it waits
//! until the holder's remaining TTL, as the busy reply tells it, or a release notification).
//!
//! **Guarantees.** At most one leader at a time while leases are valid (a lock's guarantee,
//! docs/guarantees.md §1), and terms strictly increase from leader to leader (a fencing
//! counter's, §2): a resource that refuses a term below the highest it has seen refuses a
//! deposed leader, even one that was paused and does not know it was deposed. A leader learns
//! of its loss through the guard ([`LockGuard::lost`]). Observers see each change through
//! [`Election::watch`]. Assumptions: those of locks; every candidate of `name` campaigns
//! through this type (a plain lock on `name` blocks the election, and `leader()` then reports a
//! conflict).

use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::core::acquire::{Ask, Attempts, granted};
use crate::core::error::{Error, Operation, Result};
use crate::core::guard::LockGuard;
use crate::core::kind::Backend;
use crate::core::options::LockOptions;
use crate::core::outcome::TryAcquire;
use crate::core::sync::{Election, Leader, LeaderChanges};
use crate::core::token::LockToken;
use crate::redis::client::{ChannelAttempts, OnReleaseChannel};
use crate::redis::client::{RedisClient, script_grant};
use crate::redis::scripts::{CAMPAIGN_SCRIPT as CAMPAIGN, LEADER_SCRIPT as LEADER};
use crate::redis::slot::{fence_key, slot_name};
use crate::redis::waiting::Subscription;

/// Where the current term's leader id is recorded: [`slot_name`]`(name) + ":leader"` (`term
/// id`; meaningful only while the lock `name` is held).
pub fn election_leader_key(name: &str) -> String {
    format!("{}:leader", slot_name(name))
}

/// The Redis protocol of an [`Election`] (see the module's documentation).
#[derive(Debug, Clone)]
pub(crate) struct RedisElection {
    client: RedisClient,
    name: String,
    record: String,
}

impl RedisClient {
    /// An election on `name` (no round trip).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name.
    pub(crate) fn new_election(&self, name: &str) -> Result<Election> {
        let redis = RedisElection {
            client: self.clone(),
            name: name.to_string(),
            record: election_leader_key(name),
        };
        Ok(Election::new(Backend::Redis, name, redis))
    }
}

impl RedisElection {
    async fn attempt(&self, token: &LockToken, ttl_ms: u64, id: &str) -> Result<(i64, i64)> {
        let (channel, publish) = self.client.release_notice(&self.name);
        let mut inv = CAMPAIGN.key(&self.name);
        inv.key(fence_key(&self.name))
            .key(&self.record)
            .arg(token.expose())
            .arg(ttl_ms)
            .arg(id)
            .arg(channel)
            .arg(publish);
        let mut conn = self.client.conn();
        let reply = inv.invoke_async(&mut conn).await;
        match reply.and_then(crate::redis::error::int_pair) {
            Ok(r) => Ok(r),
            Err(e) => {
                let err = Error::from_redis(Operation::Acquire, e);
                // An unreadable reply tells nothing either: the lock may have been taken.
                if err.is_ambiguous() || matches!(err, Error::UnexpectedReply { .. }) {
                    // Token-checked: harmless if the lock was not taken.
                    let _ = self.client.release_raw(&self.name, token.expose()).await;
                }
                Err(err)
            }
        }
    }
}

#[async_trait::async_trait]
impl crate::core::sync::ElectionProvider for RedisElection {
    /// Waits to become leader as `id`, until `options.wait_bound()` (for ever without one),
    /// and returns the leadership: a guard whose fencing number is the term, renewed
    /// automatically (`auto_extend` and `fencing` are always on). Resign with
    /// [`LockGuard::release`]; [`LockGuard::lost`] says when the term ended without it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long id or a bad TTL;
    /// [`Error::Unsupported`] with fair mode or `replica_ack`; [`Error::NotAcquired`] at the
    /// deadline; connection and server errors.
    async fn campaign(&self, id: &str, options: &LockOptions) -> Result<LockGuard> {
        // Checked as it will run: renewed, so at least MIN_RENEWED_TTL.
        let ttl_ms = options.clone().auto_extend(true).ttl_millis()?;
        let options = options.clone().fencing(true).auto_extend(true);
        let terms = OnReleaseChannel(TermAttempts {
            election: self,
            ttl_ms,
            id,
        });
        crate::core::acquire::wait(&terms, &options, options.wait_bound()).await
    }

    /// Who leads now, and in which term; `None` while nobody does.
    ///
    /// # Errors
    /// [`Error::Conflict`] if the lock `name` is held by something else than a campaign (a
    /// plain lock); connection and server errors.
    async fn leader(&self) -> Result<Option<Leader>> {
        let (pttl, counter, record, holder): (i64, String, String, String) = self
            .client
            .idempotent(Operation::Inspect, |mut conn| {
                let mut inv = LEADER.key(&self.name);
                inv.key(fence_key(&self.name)).key(&self.record);
                async move { inv.invoke_async(&mut conn).await }
            })
            .await?;
        if pttl == -2 {
            return Ok(None);
        }
        // `term id\ntoken`: the record is the leader's only while the lock key holds the token
        // of the campaign that wrote it, and its term is the counter's (a plain lock on the
        // name, fenced or not, is not a leader: M5). A record without a token (written by an
        // older version) is checked by its term alone.
        let (record, token) = match record.split_once('\n') {
            Some((record, token)) => (record, Some(token)),
            None => (record.as_str(), None),
        };
        let parsed = record
            .split_once(' ')
            .and_then(|(term, id)| Some((term.parse::<u64>().ok()?, id)));
        match parsed {
            Some((term, id))
                if counter.parse::<u64>().ok() == Some(term)
                    && token.is_none_or(|t| t == holder) =>
            {
                Ok(Some(Leader {
                    id: id.to_string(),
                    term,
                    ttl: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
                }))
            }
            _ => Err(Error::Conflict {
                key: self.name.clone(),
                detail: "the election's lock is held, but not by a campaign (a plain lock?)".into(),
            }),
        }
    }

    /// A leader elected or resigning is announced on the name's release channel.
    async fn changes(&self) -> Option<Box<dyn LeaderChanges>> {
        let notifier = self.client.notifier()?;
        let subscription = notifier.subscribe(&self.name).await?;
        Some(Box::new(subscription) as Box<dyn LeaderChanges>)
    }
}

/// A release channel subscription, as the election's watch hears announcements on it.
impl LeaderChanges for Subscription {
    fn mark_seen(&mut self) {
        Subscription::mark_seen(self);
    }

    fn changed(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(self.released())
    }
}

/// A candidate's attempts at the term, for the acquisition engine.
struct TermAttempts<'a> {
    election: &'a RedisElection,
    ttl_ms: u64,
    id: &'a str,
}

impl ChannelAttempts for TermAttempts<'_> {
    fn client(&self) -> &RedisClient {
        &self.election.client
    }
}

impl Attempts for TermAttempts<'_> {
    fn name(&self) -> &str {
        &self.election.name
    }

    /// The campaign script with a fresh token; a term granted too late is given back (the
    /// lock released, token-checked: [`granted`]).
    async fn attempt(&self, options: &LockOptions, _: Ask) -> Result<TryAcquire> {
        let (election, ttl_ms, id) = (self.election, self.ttl_ms, self.id);
        let client = &election.client;
        granted(
            &election.name,
            options,
            options.new_token(),
            async move |token| Ok(script_grant(election.attempt(token, ttl_ms, id).await?)),
            async |token| {
                let _ = client.release_raw(&election.name, token.expose()).await;
            },
            |token, term, started| {
                client.guard(&election.name, token, Some(term), started, options)
            },
        )
        .await
    }
}
