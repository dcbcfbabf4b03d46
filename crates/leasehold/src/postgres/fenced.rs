//! [`FencedRows`]: the fenced-write rule for the user's own tables.

use super::error::pg_error;
use crate::core::error::{Error, Operation, Result};
use crate::core::fence::{Fence, FencedWrite};

/// The fenced-write rule for rows of the user's own tables: a write carries the writer's
/// [`Fence`] and is applied only if
///
/// ```sql
/// fence < $n OR (fence = $n AND holder = sha256($token))
/// ```
///
/// so a holder whose number is lower than one the row has already seen is refused, and an
/// equal number is accepted only from the holder that claimed it first (two holders can get
/// the same number only if a lock's counter lost an increment, e.g. in a failover). The row
/// keeps the number and a SHA-256 of the token (never the token itself). The same rule as
/// [`FencedStore`](crate::redis::FencedStore) on Redis and the checker's register.
///
/// The table needs two extra columns, `fence bigint NOT NULL DEFAULT 0` and
/// `holder text NOT NULL DEFAULT ''` (names configurable); [`FencedRows::add_columns_sql`]
/// returns the `ALTER TABLE` that adds them.
///
/// ```no_run
/// # async fn demo(pg: &tokio_postgres::Client, guard: &leasehold::LockGuard) -> leasehold::Result<()> {
/// use leasehold::postgres::FencedRows;
/// let accounts = FencedRows::new("accounts", "id");
/// let fence = guard.fence().expect("acquired with fencing on");
/// // UPDATE accounts SET balance = $3, fence = .., holder = .. WHERE id = $4 AND <the rule>
/// let applied = accounts
///     .update(pg, &fence, "balance = $3", &[&42_i64, &"alice"])
///     .await?;
/// assert!(applied.is_accepted());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedRows {
    table: String,
    key_column: String,
    fence_column: String,
    holder_column: String,
}

/// Quotes an SQL identifier (`"name"`, with inner quotes doubled).
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl FencedRows {
    /// Rows of `table`, identified by `key_column`, with the columns `fence` and `holder`.
    pub fn new(table: impl Into<String>, key_column: impl Into<String>) -> Self {
        FencedRows {
            table: table.into(),
            key_column: key_column.into(),
            fence_column: "fence".into(),
            holder_column: "holder".into(),
        }
    }

    /// Other names for the fence and holder columns.
    pub fn columns(mut self, fence: impl Into<String>, holder: impl Into<String>) -> Self {
        self.fence_column = fence.into();
        self.holder_column = holder.into();
        self
    }

    /// `ALTER TABLE … ADD COLUMN IF NOT EXISTS` for the two columns.
    pub fn add_columns_sql(&self) -> String {
        format!(
            "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS {f} bigint NOT NULL DEFAULT 0, \
             ADD COLUMN IF NOT EXISTS {h} text NOT NULL DEFAULT ''",
            t = quote_ident(&self.table),
            f = quote_ident(&self.fence_column),
            h = quote_ident(&self.holder_column),
        )
    }

    /// The condition, for statements of your own: `$n` is the fencing number's parameter and
    /// `$t` the token's (both 1-based positions).
    pub fn condition_sql(&self, n: usize, t: usize) -> String {
        format!(
            "({f} < ${n} OR ({f} = ${n} AND {h} = encode(sha256(convert_to(${t}::text, 'UTF8')), 'hex')))",
            f = quote_ident(&self.fence_column),
            h = quote_ident(&self.holder_column),
        )
    }

    /// `UPDATE table SET <set>, fence = $1, holder = sha256($2) WHERE key = $<last> AND
    /// <the rule>`: `params` are the parameters of `set` from `$3` on, followed by the row's
    /// key (the last parameter). Returns whether the row was updated ([`FencedWrite::Rejected`]
    /// carries the number the row holds, or 0 if there is no such row).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a fencing number above `i64::MAX` or no key parameter;
    /// [`Error::Server`] / [`Error::Connection`] from PostgreSQL.
    pub async fn update(
        &self,
        client: &impl tokio_postgres::GenericClient,
        fence: &Fence,
        set: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<FencedWrite> {
        if params.is_empty() {
            return Err(Error::invalid(
                "params",
                "the last parameter must be the row's key",
            ));
        }
        let n = i64::try_from(fence.number())
            .map_err(|_| Error::invalid("fencing number", "above PostgreSQL's bigint"))?;
        let key_param = params.len() + 2;
        let sql = format!(
            "UPDATE {t} SET {set}, {f} = $1, {h} = encode(sha256(convert_to($2::text, 'UTF8')), 'hex') \
             WHERE {k} = ${key_param} AND {cond}",
            t = quote_ident(&self.table),
            f = quote_ident(&self.fence_column),
            h = quote_ident(&self.holder_column),
            k = quote_ident(&self.key_column),
            cond = self.condition_sql(1, 2),
        );
        let token = fence.token().expose();
        let mut all: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&n, &token];
        all.extend_from_slice(params);
        let rows = client
            .execute(sql.as_str(), &all)
            .await
            .map_err(|e| pg_error(Operation::FencedWrite, true, e))?;
        if rows > 0 {
            return Ok(FencedWrite::Accepted);
        }
        let seen = format!(
            "SELECT {f} FROM {t} WHERE {k} = $1",
            f = quote_ident(&self.fence_column),
            t = quote_ident(&self.table),
            k = quote_ident(&self.key_column),
        );
        let key = *params.last().expect("checked above");
        let highest: Option<i64> = client
            .query_opt(seen.as_str(), &[key])
            .await
            .map_err(|e| pg_error(Operation::FencedWrite, true, e))?
            .map(|r| r.get(0));
        Ok(FencedWrite::Rejected {
            highest: highest.unwrap_or(0) as u64,
        })
    }
}
