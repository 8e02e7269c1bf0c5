/*
 * api_h_repl.h — the primary's replication routes (docs/protocol.md
 * "Replication"; docs/scheduler.md "Replication"): the status, the
 * bootstrap snapshot, the changeset stream and the objects by hash.
 */
#ifndef HF_API_H_REPL_H
#define HF_API_H_REPL_H

#include "scheduler/api/api_int.h"

/* GET /api/v1/replication (any token): role, term, lsn, cluster, mode,
 * state, the standby's ack and lag (repl.h's repl_status). */
enum MHD_Result api_h_repl_status(api_call *k);
/* GET /api/v1/replication/snapshot (admins): the database as one SQLite
 * file with X-Hyperfarm-LSN, -Cluster, -Sha256. */
enum MHD_Result api_h_repl_snapshot(api_call *k);
/* GET /api/v1/replication/stream?cluster=C&term=T&after=L (admins): acks L,
 * then frames after L (200), none within 1 s (204), 409, 410. */
enum MHD_Result api_h_repl_stream(api_call *k);
/* GET /api/v1/replication/objects/{sha256} (admins): an object's bytes. */
enum MHD_Result api_h_repl_object(api_call *k);

#endif
