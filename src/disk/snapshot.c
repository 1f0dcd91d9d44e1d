/* SPDX-License-Identifier: BSD-2-Clause */
/* The disk store's index snapshots and the rebuild at open (store.c's note: Snapshots, Rebuild). */
#include "store_internal.h"

/* ---------------------------------------------------------------- snapshots */

/* The writer's (or close's): syncs the file, then notes in the superblock how far the
 * log is synced (itself synced with the next sync: an older value only makes a rebuild
 * trust a snapshot it could have known was lapped, and the scan finds that out too). */
void um__disk_do_sync(struct um_disk *d)
{
    d->dirty = false;
    d->last_sync_ms = now_ms();
    if (fdatasync(d->fd) != 0) {
        um_log(UM_LOG_ERR, "disk store %s: fdatasync: %s", d->path, strerror(errno));
        return;
    }
    if (d->written != d->super_synced && um__disk_write_super(d, d->super_cursor, d->written) != UM_OK)
        um_log(UM_LOG_ERR, "disk store %s: writing the superblock: %s", d->path,
               strerror(errno));
}

int um__disk_write_snapshot(struct um_disk *d)
{
    um__disk_do_sync(d);
    d->last_snap_ms = now_ms();
    pthread_mutex_lock(&d->mu);
    d->changed = false;
    uint64_t cursor = d->cursor;
    for (struct wjob *j = d->wq_head; j; j = j->next) {
        if (j->buf) {
            cursor = j->pos;
            break;
        }
    }
    pthread_mutex_unlock(&d->mu);

    int fd = open(d->snap_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0) {
        um_log(UM_LOG_ERR, "disk store %s: %s: %s", d->path, d->snap_tmp, strerror(errno));
        return UM_ERR;
    }
    XXH3_state_t *xs = XXH3_createState();
    UM_ASSERT(xs);
    XXH3_64bits_reset(xs);
    struct um__disk_snap_ent *buf = um_malloc(UM__DISK_CHUNK * sizeof(*buf));
    uint64_t off = sizeof(struct um__disk_snap), count = 0;
    int rc = UM_OK;
    for (uint32_t c = 0; rc == UM_OK; c++) {
        size_t n = 0;
        pthread_mutex_lock(&d->mu);
        if (c >= d->idx.nchunks) {
            pthread_mutex_unlock(&d->mu);
            break;
        }
        for (uint32_t i = 0; i < UM__DISK_CHUNK; i++) {
            const struct um__disk_ent *e = &d->idx.chunks[c][i];
            if (!e->len)
                continue;
            buf[n++] = (struct um__disk_snap_ent){e->hi, e->lo, e->pos, e->len, 0};
        }
        pthread_mutex_unlock(&d->mu);
        XXH3_64bits_update(xs, buf, n * sizeof(*buf));
        rc = pwrite_all(fd, buf, n * sizeof(*buf), off);
        off += n * sizeof(*buf);
        count += n;
    }
    struct um__disk_snap h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, UM__DISK_SNAP_MAGIC, 8);
    h.version = UM__DISK_VERSION;
    h.store_id = d->store_id;
    h.size = d->size;
    h.cursor = cursor;
    h.count = count;
    h.entries_check = XXH3_64bits_digest(xs);
    h.check = XXH3_64bits(&h, offsetof(struct um__disk_snap, check));
    XXH3_freeState(xs);
    free(buf);
    if (rc == UM_OK)
        rc = pwrite_all(fd, &h, sizeof(h), 0);
    if (rc == UM_OK && fsync(fd) != 0)
        rc = UM_ERR;
    if (close(fd) != 0)
        rc = UM_ERR;
    if (rc == UM_OK && rename(d->snap_tmp, d->snap_path) != 0)
        rc = UM_ERR;
    if (rc != UM_OK) {
        um_log(UM_LOG_ERR, "disk store %s: writing the index snapshot %s: %s", d->path,
               d->snap_tmp, strerror(errno));
        unlink(d->snap_tmp);
        return UM_ERR;
    }
    fsync_dir(d->snap_path);
    if (um__disk_write_super(d, cursor, d->written) != UM_OK || fdatasync(d->fd) != 0) {
        um_log(UM_LOG_ERR, "disk store %s: writing the superblock: %s", d->path,
               strerror(errno));
        return UM_ERR;
    }
    return UM_OK;
}

/* ---------------------------------------------------------------- rebuild */

struct found {
    uint64_t hi, lo, pos;
    uint32_t len;
    uint32_t flags;
};

enum { PROBE_OK, PROBE_BAD, PROBE_AHEAD };

/* Reads the record at log position q (any_lap: at the block of file offset phys(q),
 * whatever its lap) and checks it whole. PROBE_AHEAD: a valid header of a later lap at
 * q's place (the log has gone round since q). */
static int probe(struct um_disk *d, uint64_t q, bool any_lap, struct found *f, char **scratch,
                 size_t *scratch_len)
{
    struct um__disk_rec h;
    uint64_t off = phys(d, q);
    if (pread_all(d->fd, &h, sizeof(h), off) != UM_OK)
        return PROBE_BAD;
    if (h.magic != UM__DISK_REC_MAGIC || h.version != UM__DISK_VERSION ||
        h.store_id != d->store_id)
        return PROBE_BAD;
    if (any_lap) {
        if (h.pos % d->span != q % d->span)
            return PROBE_BAD;
    } else if (h.pos != q) {
        return h.pos > q && (h.pos - q) % d->span == 0 ? PROBE_AHEAD : PROBE_BAD;
    }
    uint64_t len = UM__DISK_REC_LEN(h.meta_len, h.body_len);
    if (len > UINT32_MAX || h.pos % d->span + len > d->span)
        return PROBE_BAD;
    if ((h.flags & UM__DISK_REC_TOMB) && (h.meta_len || h.body_len))
        return PROBE_BAD;
    if (*scratch_len < len) {
        free(*scratch);
        *scratch = um_malloc(len);
        *scratch_len = len;
    }
    if (pread_all(d->fd, *scratch, len, off) != UM_OK)
        return PROBE_BAD;
    uint64_t check;
    memcpy(&check, *scratch + len - 8, 8);
    if (check != XXH3_64bits(*scratch, len - 8))
        return PROBE_BAD;
    *f = (struct found){h.key_hi, h.key_lo, h.pos, (uint32_t)len, h.flags};
    return PROBE_OK;
}

static void apply(struct um_disk *d, const struct found *f)
{
    if (f->flags & UM__DISK_REC_TOMB)
        um__disk_index_del(&d->idx, f->hi, f->lo, f->pos);
    else
        um__disk_index_put(&d->idx, f->hi, f->lo, f->pos, f->len);
}

static int by_pos(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
static int found_by_pos(const void *a, const void *b)
{
    return by_pos(&((const struct found *)a)->pos, &((const struct found *)b)->pos);
}
static int snap_by_pos(const void *a, const void *b)
{
    return by_pos(&((const struct um__disk_snap_ent *)a)->pos,
                  &((const struct um__disk_snap_ent *)b)->pos);
}

/* Loads path.index into the (empty) index; returns its cursor, or UINT64_MAX (with the
 * reason logged) when there is none that fits this store. */
static uint64_t load_snapshot(struct um_disk *d)
{
    const char *why = NULL;
    struct um__disk_snap h;
    struct um__disk_snap_ent *ents = NULL;
    uint64_t cursor = UINT64_MAX;
    int fd = open(d->snap_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        why = errno == ENOENT ? "there is none" : strerror(errno);
        goto out;
    }
    if (pread_all(fd, &h, sizeof(h), 0) != UM_OK || memcmp(h.magic, UM__DISK_SNAP_MAGIC, 8) ||
        h.version != UM__DISK_VERSION ||
        h.check != XXH3_64bits(&h, offsetof(struct um__disk_snap, check))) {
        why = "it is damaged or of another version";
        goto out;
    }
    if (h.store_id != d->store_id || h.size != d->size) {
        why = "it belongs to another life of the store";
        goto out;
    }
    /* A snapshot ahead of the superblock is one whose superblock write a crash cut. */
    if (d->super_synced > h.cursor && d->super_synced - h.cursor >= d->span) {
        why = "it is a lap or more behind the store";
        goto out;
    }
    if (h.count > d->span / BLOCK) {
        why = "it holds more entries than the store can";
        goto out;
    }
    size_t n = (size_t)h.count;
    ents = um_malloc(n ? n * sizeof(*ents) : 1);
    if (pread_all(fd, ents, n * sizeof(*ents), sizeof(h)) != UM_OK ||
        XXH3_64bits(ents, n * sizeof(*ents)) != h.entries_check) {
        why = "its entries are damaged";
        goto out;
    }
    qsort(ents, n, sizeof(*ents), snap_by_pos);
    for (size_t i = 0; i < n; i++) {
        if (!ents[i].len) {
            why = "it has an empty entry";
            um__disk_index_dispose(&d->idx);
            um__disk_index_init(&d->idx);
            goto out;
        }
        um__disk_index_put(&d->idx, ents[i].key_hi, ents[i].key_lo, ents[i].pos, ents[i].len);
    }
    cursor = h.cursor;
out:
    if (why)
        um_log(UM_LOG_INFO, "disk store %s: no index snapshot used (%s): scanning the whole store",
               d->path, why);
    free(ents);
    if (fd >= 0)
        close(fd);
    return cursor;
}

/* Scans from snapshot cursor c; returns PROBE_AHEAD when the log went round since. */
static int scan_after(struct um_disk *d, uint64_t c, char **scratch, size_t *scratch_len)
{
    uint64_t q = c;
    struct found f;
    while (q < c + d->span) {
        int r = probe(d, q, false, &f, scratch, scratch_len);
        if (r == PROBE_BAD && q % d->span != 0) {
            /* The writer skips a region's tail that a record does not fit in. */
            uint64_t next = round_up(q, d->span);
            if (next < c + d->span)
                r = probe(d, next, false, &f, scratch, scratch_len);
        }
        if (r == PROBE_AHEAD)
            return r;
        if (r != PROBE_OK)
            break; /* the log ends at q: a torn or never-written record */
        apply(d, &f);
        q = f.pos + round_up(f.len, BLOCK);
    }
    d->cursor = q;
    return PROBE_OK;
}

static void scan_all(struct um_disk *d, char **scratch, size_t *scratch_len)
{
    size_t n = 0, cap = 0;
    struct found *all = NULL, f;
    for (uint64_t off = 0; off < d->span;) {
        if (probe(d, off, true, &f, scratch, scratch_len) != PROBE_OK) {
            off += BLOCK;
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            all = um_realloc(all, cap * sizeof(*all));
        }
        all[n++] = f;
        off += round_up(f.len, BLOCK);
    }
    qsort(all, n, sizeof(*all), found_by_pos);
    d->cursor = 0;
    for (size_t i = 0; i < n; i++) {
        apply(d, &all[i]);
        d->cursor = all[i].pos + round_up(all[i].len, BLOCK);
    }
    free(all);
}

void um__disk_rebuild(struct um_disk *d)
{
    char *scratch = NULL;
    size_t scratch_len = 0;
    uint64_t c = load_snapshot(d);
    if (c == UINT64_MAX || scan_after(d, c, &scratch, &scratch_len) == PROBE_AHEAD) {
        if (c != UINT64_MAX)
            um_log(UM_LOG_INFO, "disk store %s: the log went round since the index snapshot: "
                   "scanning the whole store", d->path);
        um__disk_index_dispose(&d->idx);
        um__disk_index_init(&d->idx);
        scan_all(d, &scratch, &scratch_len);
    }
    free(scratch);
    if (d->cursor > d->span)
        um__disk_index_evict(&d->idx, d->cursor - d->span);
    d->changed = d->cursor != d->super_cursor;
    d->written = d->cursor;
}
