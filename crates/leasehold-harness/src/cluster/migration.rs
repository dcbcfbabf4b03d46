//! Moving a slot of a [`Cluster`] from one master to another, step by step.

use std::time::Instant;

use super::topology::check_slot;
use super::view::NodeLine;
use super::{Cluster, MIGRATE_BATCH, MIGRATE_TIMEOUT_MS, QUERY_TIMEOUT, expect_ok};
use crate::{HarnessError, RespValue};

impl Cluster {
    /// First step of a slot migration: `CLUSTER SETSLOT <slot> IMPORTING <from-id>` on `to`,
    /// then `CLUSTER SETSLOT <slot> MIGRATING <to-id>` on `from` (the order `redis-cli`
    /// uses). From now on, `from` answers `-ASK` for keys of the slot that it does not hold.
    ///
    /// `from` must be the slot's current owner and `to` another live master.
    pub fn begin_migration(&self, slot: u16, from: usize, to: usize) -> Result<(), HarnessError> {
        self.check_migration(slot, from, to)?;
        let slot_s = slot.to_string();
        expect_ok(
            &self.nodes[to],
            &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &self.ids[from]],
        )?;
        expect_ok(
            &self.nodes[from],
            &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &self.ids[to]],
        )
    }

    fn check_migration(&self, slot: u16, from: usize, to: usize) -> Result<(), HarnessError> {
        check_slot(slot)?;
        self.check_live(from)?;
        self.check_live(to)?;
        if from == to {
            return Err(HarnessError::InvalidArgument(format!(
                "cannot migrate slot {slot} from node {from} to itself"
            )));
        }
        let view = self.view_of(from)?;
        let owner = view.owners(self)[usize::from(slot)];
        if owner != Some(from) {
            return Err(HarnessError::InvalidArgument(format!(
                "node {from} does not own slot {slot} (owner: {owner:?})"
            )));
        }
        if !view.line(&self.ids[to]).is_some_and(NodeLine::is_master) {
            return Err(HarnessError::InvalidArgument(format!(
                "node {to} is not a master"
            )));
        }
        Ok(())
    }

    /// Second step: moves every key of `slot` from `from` to `to` with
    /// `CLUSTER GETKEYSINSLOT` and `MIGRATE 127.0.0.1 <port> "" 0 10000 [AUTH pw] KEYS ...`,
    /// in batches of 100, until `from` holds none. Returns how many keys were sent (keys
    /// that expired in between count too).
    ///
    /// Call it between [`Cluster::begin_migration`] and [`Cluster::finish_migration`].
    pub fn migrate_keys(&self, slot: u16, from: usize, to: usize) -> Result<usize, HarnessError> {
        check_slot(slot)?;
        self.check_live(from)?;
        self.check_live(to)?;
        let source = &self.nodes[from];
        // With TLS the nodes talk TLS among themselves (`--tls-cluster yes`), MIGRATE included.
        let port = self.nodes[to]
            .tls_port()
            .unwrap_or_else(|| self.nodes[to].port())
            .to_string();
        let slot_s = slot.to_string();
        let batch = MIGRATE_BATCH.to_string();
        let deadline = Instant::now() + self.stable_timeout();
        let mut moved = 0;
        loop {
            let reply = source.command_timeout(
                &["CLUSTER", "GETKEYSINSLOT", &slot_s, &batch],
                QUERY_TIMEOUT,
            )?;
            let keys: Vec<Vec<u8>> = match reply.as_array() {
                Some(items) => items
                    .iter()
                    .map(|k| {
                        k.as_bytes().map(<[u8]>::to_vec).ok_or_else(|| {
                            HarnessError::Protocol(format!("CLUSTER GETKEYSINSLOT: {reply}"))
                        })
                    })
                    .collect::<Result<_, _>>()?,
                None => {
                    return Err(HarnessError::Server(format!(
                        "CLUSTER GETKEYSINSLOT {slot}: {reply}"
                    )));
                }
            };
            if keys.is_empty() {
                return Ok(moved);
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout(format!(
                    "migrating the keys of slot {slot}: {moved} moved, more keep appearing"
                )));
            }
            let mut args: Vec<&[u8]> = vec![
                b"MIGRATE",
                b"127.0.0.1",
                port.as_bytes(),
                b"",
                b"0",
                MIGRATE_TIMEOUT_MS.as_bytes(),
            ];
            if let Some(pass) = self.options.server.password() {
                args.push(b"AUTH");
                args.push(pass.as_bytes());
            }
            args.push(b"KEYS");
            args.extend(keys.iter().map(Vec::as_slice));
            match source.command_bytes(&args)? {
                reply if reply.is_ok() => moved += keys.len(),
                // All of them expired meanwhile.
                RespValue::Simple(s) if s == "NOKEY" => {}
                reply => {
                    return Err(HarnessError::Server(format!(
                        "MIGRATE of {} keys of slot {slot} to node {to}: {reply}",
                        keys.len()
                    )));
                }
            }
        }
    }

    /// Last step: `CLUSTER SETSLOT <slot> NODE <to-id>` on `to`, on the slot's current owner
    /// and on every other live master; then waits until all live nodes agree that `to`
    /// owns the slot and the cluster is stable.
    ///
    /// Fails with [`HarnessError::InvalidArgument`] (before changing anything) if the
    /// current owner still holds keys of the slot.
    pub fn finish_migration(&self, slot: u16, to: usize) -> Result<(), HarnessError> {
        check_slot(slot)?;
        self.check_live(to)?;
        let from = self.master_index_for_slot(slot)?;
        if from != to && self.nodes[from].is_live() {
            let reply = self.nodes[from].command_timeout(
                &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()],
                QUERY_TIMEOUT,
            )?;
            match reply.as_integer() {
                Some(0) => {}
                Some(n) => {
                    return Err(HarnessError::InvalidArgument(format!(
                        "node {from} still holds {n} keys of slot {slot}; call migrate_keys first"
                    )));
                }
                None => {
                    return Err(HarnessError::Server(format!(
                        "CLUSTER COUNTKEYSINSLOT {slot}: {reply}"
                    )));
                }
            }
        }
        let slot_s = slot.to_string();
        let setslot = ["CLUSTER", "SETSLOT", &slot_s, "NODE", &self.ids[to]];
        expect_ok(&self.nodes[to], &setslot)?;
        if from != to && self.nodes[from].is_live() {
            expect_ok(&self.nodes[from], &setslot)?;
        }
        for m in self.master_indices()? {
            if m != to && m != from && self.nodes[m].is_live() {
                expect_ok(&self.nodes[m], &setslot)?;
            }
        }
        self.wait_for_owner(&[slot], to, "the migration")?;
        self.wait_until_stable()
    }

    /// All three steps of moving `slot` from `from` to `to`; returns the number of keys
    /// moved.
    pub fn migrate_slot(&self, slot: u16, from: usize, to: usize) -> Result<usize, HarnessError> {
        self.begin_migration(slot, from, to)?;
        let moved = self.migrate_keys(slot, from, to)?;
        self.finish_migration(slot, to)?;
        Ok(moved)
    }
}
