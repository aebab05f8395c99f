// Package hfdataset reads and writes the directories Hugging Face's
// datasets library saves with Dataset.save_to_disk and loads with
// load_from_disk: one or more Arrow IPC stream files
// (data-NNNNN-of-NNNNN.arrow), state.json naming them with the
// dataset's format, and dataset_info.json with its features. These are
// the datasets speculators' preprocessing writes and its trainer reads:
// rows of input_ids, loss_mask and seq_len, whose row number is the idx
// of the sample's hidden_states/hs_<idx>.safetensors beside them.
//
// The layout follows datasets' own code (arrow_dataset.py save_to_disk
// and load_from_disk, arrow_writer.py, features.py, 4.x): the stream
// format, not the Arrow file format; the features in the schema's
// "huggingface" metadata and in dataset_info.json; shards of at most
// 500 MB.
package hfdataset
