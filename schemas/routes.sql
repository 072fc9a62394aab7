-- schemas/routes.sql — the routes table: the route_choices view of schemas/trace.sql as a table,
-- one row per routing choice, ordered and indexed so that sqlite3 answers questions about a long
-- trace in seconds. `moeplan trace materialize TRACE.db` adds it to a finished trace (documented in
-- docs/trace-format.md, "The routes table"); nothing else writes it, and no reader needs it.
--
-- Invariants (collector/trace_materialize.c keeps them):
--  * The table appears only complete: it is written into a copy of the trace, which is renamed
--    over the trace once the table and its index are in it. A trace lacks it or has all of it.
--  * Its rows are exactly the routing records the fail-closed reader (collector/trace_check.h)
--    accepts, decoded: one row per (request, step, node, row, rank) of every step (prefill rows
--    too), rank being the slot in the router's order (0 = its first choice), expert_id the id,
--    weight the stored f16 or f32 weight as a double (exactly). The same rows as route_choices.
--  * Adding it changes no other table: the schema version stays 2, every reader ignores it.
--
-- Layout: the rows are stored in (node_index, expert_id, ...) order, because nearly every
-- question is per layer and per expert: a layer's or an expert's routes are one contiguous range,
-- and GROUP BY node_index[, expert_id] reads in order without sorting. The index gives the other
-- order, by token: its entries hold every column but weight, so per-request questions and joins
-- of the choices of one token (co-occurrence) read the index alone.
CREATE TABLE routes (
  node_index INTEGER NOT NULL,
  expert_id  INTEGER NOT NULL,
  request_id INTEGER NOT NULL,
  step       INTEGER NOT NULL,
  row        INTEGER NOT NULL,  -- the row (token) within the step, 0-based
  rank       INTEGER NOT NULL,  -- the slot within the row, 0 = the router's first choice
  weight     REAL NOT NULL,     -- the router weight the combine used
  PRIMARY KEY (node_index, expert_id, request_id, step, row, rank)
) WITHOUT ROWID;

-- Built once the rows are in (a sorted build packs its pages), so it is the last statement here.
CREATE INDEX routes_by_token ON routes (request_id, step, node_index, row);
