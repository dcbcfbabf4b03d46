//! `CLUSTER NODES`, parsed.

use std::collections::BTreeMap;

use super::{CLUSTER_SLOTS, Cluster};
use crate::HarnessError;

/// One node's `CLUSTER NODES`, parsed.
#[derive(Debug)]
pub(super) struct View {
    /// The index of the node that answered.
    pub(super) source: usize,
    pub(super) text: String,
    pub(super) lines: Vec<NodeLine>,
}

/// One line of `CLUSTER NODES`:
/// `<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch>
/// <link-state> <slot> <slot> ...`.
#[derive(Debug)]
pub(super) struct NodeLine {
    pub(super) id: String,
    pub(super) flags: Vec<String>,
    pub(super) master_id: Option<String>,
    /// The config epoch this view gives the node (a replica's line shows its master's).
    pub(super) config_epoch: u64,
    /// Inclusive slot ranges (importing/migrating annotations `[...]` are skipped).
    pub(super) slots: Vec<(u16, u16)>,
}

/// What a node is, as comparable data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Role {
    Master,
    ReplicaOf(String),
    Other(String),
}

impl NodeLine {
    pub(super) fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    pub(super) fn is_master(&self) -> bool {
        self.has_flag("master") || self.has_flag("primary")
    }

    pub(super) fn is_replica(&self) -> bool {
        self.has_flag("slave") || self.has_flag("replica")
    }

    pub(super) fn role(&self) -> Role {
        if self.is_master() {
            Role::Master
        } else if self.is_replica() {
            Role::ReplicaOf(self.master_id.clone().unwrap_or_default())
        } else {
            Role::Other(self.flags.join(","))
        }
    }
}

impl View {
    pub(super) fn parse(source: usize, text: &str) -> Result<View, HarnessError> {
        let mut lines = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return Err(HarnessError::Protocol(format!(
                    "CLUSTER NODES: short line {line:?}"
                )));
            }
            let config_epoch = fields[6].parse().map_err(|_| {
                HarnessError::Protocol(format!("CLUSTER NODES: bad config epoch in {line:?}"))
            })?;
            let mut slots = Vec::new();
            for token in &fields[8..] {
                if token.starts_with('[') {
                    continue;
                }
                let (a, b) = token.split_once('-').unwrap_or((token, token));
                match (a.parse::<u16>(), b.parse::<u16>()) {
                    (Ok(a), Ok(b)) if a <= b && b < CLUSTER_SLOTS => slots.push((a, b)),
                    _ => {
                        return Err(HarnessError::Protocol(format!(
                            "CLUSTER NODES: bad slot range {token:?} in {line:?}"
                        )));
                    }
                }
            }
            lines.push(NodeLine {
                id: fields[0].to_owned(),
                flags: fields[2].split(',').map(str::to_owned).collect(),
                master_id: Some(fields[3]).filter(|m| *m != "-").map(str::to_owned),
                config_epoch,
                slots,
            });
        }
        Ok(View {
            source,
            text: text.to_owned(),
            lines,
        })
    }

    pub(super) fn myself(&self) -> Option<&NodeLine> {
        self.lines.iter().find(|l| l.has_flag("myself"))
    }

    pub(super) fn line(&self, id: &str) -> Option<&NodeLine> {
        self.lines.iter().find(|l| l.id == id)
    }

    /// A node other than `claimant` that this view has serving one of `slots` with a config
    /// epoch of at least `epoch`, and that slot. A node with this view never gives the slot to
    /// `claimant` while `claimant` claims it with `epoch`: a claim wins a slot only with a
    /// config epoch greater than its current owner's.
    pub(super) fn outranks(
        &self,
        slots: &[u16],
        claimant: &str,
        epoch: u64,
    ) -> Option<(u16, &NodeLine)> {
        self.lines
            .iter()
            .filter(|l| l.id != claimant && l.config_epoch >= epoch)
            .find_map(|l| {
                slots
                    .iter()
                    .find(|&&s| l.slots.iter().any(|&(a, b)| a <= s && s <= b))
                    .map(|&s| (s, l))
            })
    }

    /// The owner (node index) of each slot; `None` for unassigned slots or unknown nodes.
    pub(super) fn owners(&self, cluster: &Cluster) -> Vec<Option<usize>> {
        let mut owners = vec![None; usize::from(CLUSTER_SLOTS)];
        let index: BTreeMap<&str, usize> = cluster
            .ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        for line in &self.lines {
            let Some(&i) = index.get(line.id.as_str()) else {
                continue;
            };
            for &(a, b) in &line.slots {
                for slot in a..=b {
                    owners[usize::from(slot)] = Some(i);
                }
            }
        }
        owners
    }
}
