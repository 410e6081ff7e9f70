/* psd --export: the rows of nodes' snapshots as NumPy .npy files, so that
 * a trained model can leave psd (evaluation, serving, another framework)
 * without a client that knows every key. README.md, "Exporting a model",
 * describes the files; python/psclient/export.py reads them. */
#ifndef PSD_EXPORT_H
#define PSD_EXPORT_H

/* Loads each node of the cluster in ini (only node `only` when >= 0) from
 * its data_dir as a restart would, reading only: its snapshot (tables
 * found by name; drop: the --drop-table names, ndrop of them, not owned),
 * then the journal after it, up to the last whole record (a live node's
 * too). Writes into out_dir (made when missing) per table and node
 * TABLE.nodeN.keys.npy (u64 keys, or a dense table's row numbers) and
 * TABLE.nodeN.npy (f32, one row of dim values per key), and
 * export.nodeN.json describing them, in place of what an earlier export
 * of that node (of every node, when only < 0) left there: the new files
 * are staged, and the earlier ones stay as they were when it fails. A
 * node with neither snapshot nor journal is refused. Says what it wrote
 * on stderr. Returns the exit status: 0, or 1 with the reason on
 * stderr. */
int psd_export(const char *ini, int only, const char *const *drop,
               int ndrop, const char *out_dir);

#endif
