/* psd --import: a model's rows from NumPy .npy files into a new cluster's
 * first snapshots, so that training starts from them (pretrained
 * embeddings, a model psd --export wrote under another layout, other
 * shards or another updater). README.md, "Importing a model", says which
 * files it reads. */
#ifndef PSD_IMPORT_H
#define PSD_IMPORT_H

/* Reads the .npy files of src_dir for the tables of ini: per table NAME,
 * NAME.npy with NAME.keys.npy (keys: uint64 or int64, one per row;
 * values: float32 rows of the table's dim), or NAME.SUFFIX.npy with
 * NAME.SUFFIX.keys.npy (psd --export's NAME.nodeN files), or for a dense
 * table NAME.npy alone, holding all its rows in order. Every row lands
 * on the node that owns its key under ini; the rows no file names keep
 * their init, and optimizer state starts at zero (ftrl's z is set so that
 * the weight stands: psd_table_set_row). Builds every node (only
 * `only` when >= 0) in memory, checking every row (key in range, no key
 * twice, finite unless the table allows otherwise, max_rows), and only
 * then writes each node's snapshot into its data_dir, which must hold no
 * files of that node (an import starts a model; it never replaces one)
 * and no running psd. Says what it did on stderr. Returns the exit
 * status: 0, or 1 with the reason on stderr. */
int psd_import(const char *ini, int only, const char *src_dir);

#endif
