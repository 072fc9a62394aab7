-- schemas/trace.sql — the moeplan trace: the contract between the runtime (through the
-- collector), the analyzer and the simulator. Documented column by column in docs/trace-format.md.
--
-- Invariants (the writer keeps them; the analyzer checks them and refuses a trace that breaks one):
--  * run.status is 'complete' only after the footer row is written, in the same transaction.
--  * request_id increases in the order requests ran (requests.ord = 0, 1, 2, ...); steps of a
--    request are numbered 0, 1, 2, ... with no gap; routing and timing rows name an existing
--    (request_id, step), timing rows also a node_index of the nodes table.
--  * One routing row per (request, step) holds the routing of every node of the nodes table, in
--    node_index order: routing.expert_ids is the concatenation, node by node, of (n_rows, top_k)
--    ids of that node, each nodes.id_bytes wide, little-endian unsigned; routing.weights likewise
--    holds n_rows × top_k weights per node in nodes.weight_format ('f16' or 'f32', IEEE
--    little-endian). A step without routing has no row; a step never has routing for only some
--    nodes. (Schema version 1 had one row per (request, step, node); readers still read it.)
--  * Routing is keyed by one packed integer, key = request_id << 24 | step (step < 2^24,
--    request_id < 2^27); timing by key = request_id << 36 | step << 12 | node_index
--    (node_index < 4096). request_id, step and node_index are virtual columns decoded from them.
PRAGMA application_id = 1297110098; -- 0x4D505452, "MPTR"
PRAGMA user_version = 2;            -- the schema version; readers read 1 and 2, refuse others

CREATE TABLE run (
  id              INTEGER PRIMARY KEY CHECK (id = 1),
  moeplan_version TEXT NOT NULL,
  source          TEXT NOT NULL CHECK (source IN ('moeplan', 'onnxruntime', 'strata', 'csv')),
  source_path     TEXT,     -- imported file, or NULL for live capture
  model_path      TEXT,
  model_sha256    TEXT,     -- 64 lowercase hex digits of the GGUF file
  architecture    TEXT,     -- GGUF general.architecture (qwen3moe, olmoe, mixtral, ...)
  n_layers        INTEGER,  -- transformer blocks
  n_moe_layers    INTEGER,  -- rows of the nodes table
  n_experts       INTEGER,  -- routed experts per MoE layer
  top_k           INTEGER,  -- experts used per token
  n_embd          INTEGER,
  n_ff_expert     INTEGER,
  n_vocab         INTEGER,
  quant_types     TEXT,     -- e.g. 'Q4_K:expert_gate,Q6_K:expert_down' (free text, from the GGUF)
  device          TEXT,     -- 'cpu' or 'cuda:0' ...
  gpu_name        TEXT,
  cpu_model       TEXT,
  threads         INTEGER,
  profile_sha256  TEXT,     -- STRP profile in force, NULL if none
  budget_bytes    INTEGER,  -- GPU expert budget in force, NULL if none
  config_json     TEXT,     -- the full run configuration as a JSON object
  start_time      TEXT NOT NULL, -- ISO 8601 UTC
  end_time        TEXT,          -- set by finish or abort
  status          TEXT NOT NULL CHECK (status IN ('running', 'complete', 'aborted')),
  error           TEXT,          -- why the run was aborted
  -- Added to version 2 without changing it: readers name their columns, so they ignore these,
  -- and traces written before these existed lack them.
  moeplan_commit  TEXT,     -- git describe of the writer's source tree, 'unknown' outside a checkout
  moeplan_build   TEXT      -- the writer's build options ('buildtype=release cuda=enabled ...')
);

CREATE TABLE nodes (
  node_index    INTEGER PRIMARY KEY CHECK (node_index BETWEEN 0 AND 4095),
  node_type     TEXT NOT NULL,     -- 'moe' (moeplan), or the foreign op type ('QMoE', ...)
  node_name     TEXT NOT NULL,     -- 'blk.3.ffn_moe' or the foreign node name
  layer         INTEGER NOT NULL,  -- transformer block index
  n_experts     INTEGER NOT NULL CHECK (n_experts BETWEEN 1 AND 65536),
  top_k         INTEGER NOT NULL CHECK (top_k BETWEEN 1 AND n_experts),
  expert_bytes  INTEGER,           -- bytes of one expert (gate+up+down) from the GGUF; NULL if unknown
  id_bytes      INTEGER NOT NULL CHECK (id_bytes IN (1, 2)), -- 1 if n_experts <= 256, else 2
  weight_format TEXT NOT NULL CHECK (weight_format IN ('f16', 'f32'))
);

CREATE TABLE requests (
  request_id      INTEGER PRIMARY KEY,
  ord             INTEGER NOT NULL UNIQUE, -- 0, 1, 2, ... in the order requests ran
  external_id     TEXT,                    -- prompt-file id or the foreign trace's request id
  n_prompt_tokens INTEGER,                 -- NULL if unknown (imports)
  n_gen_tokens    INTEGER,                 -- set by request end; NULL while running
  start_ns        INTEGER,                 -- CLOCK_MONOTONIC ns (relative to the run)
  end_ns          INTEGER,
  prompt_sha256   TEXT,                    -- SHA-256 of the prompt tokens as int32 LE
  prompt_text     TEXT                     -- only with --store-prompts
);

CREATE TABLE steps (
  request_id  INTEGER NOT NULL,
  step        INTEGER NOT NULL,             -- 0, 1, 2, ... within the request
  phase       TEXT NOT NULL CHECK (phase IN ('prefill', 'decode')),
  n_rows      INTEGER NOT NULL,             -- tokens evaluated in this step
  pos         INTEGER,                      -- KV position of the first row
  duration_ns INTEGER,                      -- wall time of the step, NULL if unknown
  PRIMARY KEY (request_id, step)
) WITHOUT ROWID;

CREATE TABLE routing (
  key         INTEGER PRIMARY KEY,          -- request_id << 24 | step
  n_rows      INTEGER NOT NULL,             -- rows of the step (= steps.n_rows)
  expert_ids  BLOB NOT NULL,                -- per node in node_index order: (n_rows, top_k) ids
  weights     BLOB NOT NULL,                -- per node in node_index order: (n_rows, top_k) weights
  request_id  INTEGER GENERATED ALWAYS AS (key >> 24) VIRTUAL,
  step        INTEGER GENERATED ALWAYS AS (key & 16777215) VIRTUAL
);

CREATE TABLE timing (
  key           INTEGER PRIMARY KEY,        -- as routing.key
  gpu_expert_ns INTEGER NOT NULL,
  cpu_expert_ns INTEGER NOT NULL,
  h2d_bytes     INTEGER NOT NULL,
  h2d_ns        INTEGER NOT NULL,
  d2h_bytes     INTEGER NOT NULL,
  d2h_ns        INTEGER NOT NULL,
  sync_ns       INTEGER NOT NULL,
  merge_ns      INTEGER NOT NULL,
  hits          INTEGER NOT NULL,           -- routes served by GPU-resident experts
  misses        INTEGER NOT NULL,           -- routes served from host memory
  -- Added to version 2 without changing it (NULL or absent in traces written before): the GPU
  -- executor's adaptive tier at this node and step (0 without one).
  tier_hits       INTEGER,                  -- routes its slots served (counted in hits too)
  tier_late       INTEGER,                  -- routes to experts whose copy had not landed (in misses)
  tier_admissions INTEGER,                  -- experts the invocation admitted (copied after the step)
  tier_evictions  INTEGER,
  tier_copy_bytes INTEGER,                  -- the admissions' weight bytes
  -- Added to version 2 the same way (NULL or absent: not recorded): the path that served each
  -- route, one byte per route, (n_rows, top_k) row-major in the routing BLOB's order: 0 gpu
  -- (resident), 1 tier (adaptive-tier slot), 2 cpu, 3 far (decode, read over the bus), 4 copy
  -- (prefill, staged to the GPU). gpu + tier codes = hits, tier = tier_hits, the rest = misses.
  served          BLOB,
  request_id    INTEGER GENERATED ALWAYS AS (key >> 36) VIRTUAL,
  step          INTEGER GENERATED ALWAYS AS ((key >> 12) & 16777215) VIRTUAL,
  node_index    INTEGER GENERATED ALWAYS AS (key & 4095) VIRTUAL
);

CREATE TABLE cupti (
  id             INTEGER PRIMARY KEY,
  kind           TEXT NOT NULL CHECK (kind IN ('kernel', 'memcpy')),
  name           TEXT,                      -- kernel name, or memcpy kind ('HtoD', 'DtoH', ...)
  start_ns       INTEGER NOT NULL,          -- CUPTI timestamps (GPU clock, ns)
  end_ns         INTEGER NOT NULL,
  bytes          INTEGER,                   -- memcpy only
  device_id      INTEGER,
  stream_id      INTEGER,
  correlation_id INTEGER,
  request_id     INTEGER,                   -- the (request, step, node) the activity ran for,
  step           INTEGER,                   --   from the external correlation id; NULL if none
  node_index     INTEGER
);

CREATE TABLE footer (
  id          INTEGER PRIMARY KEY CHECK (id = 1),
  n_requests  INTEGER NOT NULL,
  n_steps     INTEGER NOT NULL,
  n_routing   INTEGER NOT NULL,
  n_timing    INTEGER NOT NULL,
  n_cupti     INTEGER NOT NULL
);

-- Every byte value once, in order: instr(bytes, substr(blob, p, 1)) - 1 is the byte at p. Lets the
-- view below decode the little-endian BLOBs in plain SQL (SQLite has no byte-to-integer function).
CREATE TABLE byte_values (id INTEGER PRIMARY KEY CHECK (id = 1), bytes BLOB NOT NULL);
INSERT INTO byte_values VALUES (1, X'000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F202122232425262728292A2B2C2D2E2F303132333435363738393A3B3C3D3E3F404142434445464748494A4B4C4D4E4F505152535455565758595A5B5C5D5E5F606162636465666768696A6B6C6D6E6F707172737475767778797A7B7C7D7E7F808182838485868788898A8B8C8D8E8F909192939495969798999A9B9C9D9E9FA0A1A2A3A4A5A6A7A8A9AAABACADAEAFB0B1B2B3B4B5B6B7B8B9BABBBCBDBEBFC0C1C2C3C4C5C6C7C8C9CACBCCCDCECFD0D1D2D3D4D5D6D7D8D9DADBDCDDDEDFE0E1E2E3E4E5E6E7E8E9EAEBECEDEEEFF0F1F2F3F4F5F6F7F8F9FAFBFCFDFEFF');

-- One row per routing choice: (request, step, node, row, rank) -> expert and weight. For ad-hoc
-- questions in sqlite3 (popularity, co-occurrence); the analyzer reads the BLOBs directly. It
-- decodes at every query (~1.8 us of CPU per decision): on a long trace, query the table routes
-- instead (the same rows, stored and indexed: schemas/routes.sql, moeplan trace materialize).
-- nd gives each node's byte offset per row within a step's BLOBs (the nodes before it, in
-- node_index order); c slices the node's part out and walks it. weight needs SQLite's math
-- functions (pow), present in the sqlite3 shell since 3.35.
CREATE VIEW route_choices AS
WITH RECURSIVE nd(node_index, top_k, id_bytes, weight_format, id_off, w_off) AS (
  SELECT n.node_index, n.top_k, n.id_bytes, n.weight_format,
    (SELECT coalesce(sum(p.top_k * p.id_bytes), 0) FROM nodes p WHERE p.node_index < n.node_index),
    (SELECT coalesce(sum(p.top_k * CASE p.weight_format WHEN 'f16' THEN 2 ELSE 4 END), 0)
     FROM nodes p WHERE p.node_index < n.node_index)
  FROM nodes n
), c(key, node_index, i, n, top_k, id_bytes, weight_format, ids, w, b) AS (
  SELECT r.key, nd.node_index, 0, r.n_rows * nd.top_k, nd.top_k, nd.id_bytes, nd.weight_format,
         substr(r.expert_ids, r.n_rows * nd.id_off + 1, r.n_rows * nd.top_k * nd.id_bytes),
         substr(r.weights, r.n_rows * nd.w_off + 1,
                r.n_rows * nd.top_k * CASE nd.weight_format WHEN 'f16' THEN 2 ELSE 4 END),
         (SELECT bytes FROM byte_values)
  FROM routing r, nd
  UNION ALL
  SELECT key, node_index, i + 1, n, top_k, id_bytes, weight_format, ids, w, b FROM c
  WHERE i + 1 < n
), v AS (
  SELECT key, node_index, i, top_k,
    CASE id_bytes
      WHEN 1 THEN instr(b, substr(ids, i + 1, 1)) - 1
      ELSE instr(b, substr(ids, 2 * i + 1, 1)) - 1 + 256 * (instr(b, substr(ids, 2 * i + 2, 1)) - 1)
    END AS expert_id,
    CASE weight_format
      WHEN 'f16' THEN instr(b, substr(w, 2 * i + 1, 1)) - 1 + 256 * (instr(b, substr(w, 2 * i + 2, 1)) - 1)
      ELSE instr(b, substr(w, 4 * i + 1, 1)) - 1 + 256 * (instr(b, substr(w, 4 * i + 2, 1)) - 1)
           + 65536 * (instr(b, substr(w, 4 * i + 3, 1)) - 1) + 16777216 * (instr(b, substr(w, 4 * i + 4, 1)) - 1)
    END AS bits,
    weight_format
  FROM c
)
SELECT key >> 24 AS request_id, key & 16777215 AS step, node_index,
  i / top_k AS row, i % top_k AS rank, expert_id,
  CASE weight_format
    WHEN 'f16' THEN (CASE WHEN bits & 32768 THEN -1.0 ELSE 1.0 END) * CASE (bits >> 10) & 31
      WHEN 0 THEN (bits & 1023) / 16777216.0
      WHEN 31 THEN NULL
      ELSE (1024 + (bits & 1023)) * pow(2, ((bits >> 10) & 31) - 25) END
    ELSE (CASE WHEN bits & 2147483648 THEN -1.0 ELSE 1.0 END) * CASE (bits >> 23) & 255
      WHEN 0 THEN (bits & 8388607) * pow(2, -149)
      WHEN 255 THEN NULL
      ELSE (8388608 + (bits & 8388607)) * pow(2, ((bits >> 23) & 255) - 150) END
  END AS weight
FROM v;
