/* psd --reshard: moves a stopped cluster's model onto another node count.
 * A row's shard depends only on its key and `shards`, and shard s lives
 * on node s % nodes, so a new node count moves whole shards between
 * nodes: each keeps its rows, optimizer state and step counters as they
 * are. README.md, "Changing the node count", says how it is used. */
#ifndef PSD_RESHARD_H
#define PSD_RESHARD_H

/* Loads every node of the cluster in old_ini from its data_dir, as a
 * restart would (its snapshot, then the journal after it), reading only;
 * every node must be stopped (one whose psd holds its lock is refused)
 * and its training job over (every worker absent, no bsp sums waiting:
 * psctl end-job). Then writes into out_dir, made when missing and holding
 * no psd files, the snapshot of each node of new_ini (psd-nodeN.snap),
 * holding the shards it owns there. new_ini must have old_ini's shards
 * and tables (name, kind, dim, rows, updater, consistency, in the same
 * order); its nodes, workers and everything else may differ. The
 * snapshots' workers are absent at the largest clock and barrier count
 * any old node had; the memory of applied pushes starts empty (clients
 * open anew against a new layout). Says what it did on stderr. Returns
 * the exit status: 0, or 1 with the reason on stderr. */
int psd_reshard(const char *old_ini, const char *new_ini,
                const char *out_dir);

#endif
