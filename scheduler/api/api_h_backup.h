/*
 * api_h_backup.h — the backup route (docs/protocol.md, "Backups"):
 * POST /api/v1/backups queues an online snapshot of the database and the
 * checkpoint store into a directory of the scheduler's own server
 * (scheduler/store/backup.h), GET /api/v1/backups/{id} tells how it went.
 * Admins only.
 */
#ifndef HF_API_H_BACKUP_H
#define HF_API_H_BACKUP_H

#include "scheduler/api/api_int.h"

/* POST /api/v1/backups: queue a snapshot (202 with its id). */
enum MHD_Result api_h_backup_take(api_call *k);
/* GET /api/v1/backups/{id}: its state and, once done, its result. */
enum MHD_Result api_h_backup_get(api_call *k);

#endif
