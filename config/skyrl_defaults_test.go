package config

import "testing"

// SkyRL's delta sync writes with zstd level 1 and rolls payload files at
// 1 GB (NovaSky-AI/SkyRL skyrl/backends/skyrl_train/weight_sync/
// delta_checkpoint.py: compress_bytes(..., level=1), DeltaCheckpointPublisher
// max_file_size_in_gb=1.0). The old defaults stay reachable from a file.
func TestPublisherDefaultsAreSkyRLs(t *testing.T) {
	d := DefaultPublisher()
	if d.ZstdLevel != 1 || d.MaxFileSizeGB != 1 {
		t.Fatalf("publisher defaults zstd_level %d, max_file_size_gb %v; SkyRL uses 1 and 1", d.ZstdLevel, d.MaxFileSizeGB)
	}
	c, err := Parse("old.yaml", []byte("publisher:\n  zstd_level: 3\n  max_file_size_gb: 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Publisher.ZstdLevel != 3 || c.Publisher.MaxFileSizeGB != 5 {
		t.Fatalf("old values not honoured: %+v", c.Publisher)
	}
}
