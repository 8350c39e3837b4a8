package config

import (
	"strings"
	"testing"
)

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

// The trainer section offers SkyRL's policy-loss and off-policy knobs with
// SkyRL's defaults (skyrl/train/config/ppo_base_config.yaml: policy_loss_type
// regular, clip_ratio_c 3, off_policy_correction.tis_ratio_type null,
// token_tis_ratio_clip_high 2, sequence_tis_ratio_clip_high 5,
// cispo_eps_clip_low 0, cispo_eps_clip_high 5), and bad values name the field.
func TestTrainerSkyRLKnobs(t *testing.T) {
	d := DefaultTrainer()
	if d.PolicyLossType != PolicyLossRegular || d.ClipRatioC != 3 || d.TISRatioType != TISNone ||
		d.TokenTISRatioClipHigh != 2 || d.SequenceTISRatioClipHigh != 5 || d.CISPOEpsClipLow != 0 ||
		d.CISPOEpsClipHigh != 5 || d.MaxSeqLen != 0 {
		t.Fatalf("defaults %+v", d)
	}
	c, err := Parse("skyrl.yaml", []byte("trainer:\n  loss_reduction: prompt_mean\n  policy_loss_type: cispo\n  tis_ratio_type: token\n  token_tis_ratio_clip_high: 3\n  max_seq_len: 2048\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Trainer.LossReduction != LossPromptMean || c.Trainer.PolicyLossType != PolicyLossCISPO ||
		c.Trainer.TISRatioType != TISToken || c.Trainer.TokenTISRatioClipHigh != 3 || c.Trainer.MaxSeqLen != 2048 {
		t.Fatalf("parsed %+v", c.Trainer)
	}
	for _, tc := range []struct{ yaml, field string }{
		{"trainer:\n  policy_loss_type: ppo\n", "trainer.policy_loss_type"},
		{"trainer:\n  tis_ratio_type: null_\n", "trainer.tis_ratio_type"},
		{"trainer:\n  loss_reduction: token_mean_legacyy\n", "trainer.loss_reduction"},
		{"trainer:\n  clip_ratio_c: 1\n", "trainer.clip_ratio_c"},
		{"trainer:\n  token_tis_ratio_clip_high: 0\n", "trainer.token_tis_ratio_clip_high"},
		{"trainer:\n  max_seq_len: -1\n", "trainer.max_seq_len"},
		{"trainer:\n  tis_imp_ratio_cap: 2\n", "tis_imp_ratio_cap"},
	} {
		_, err := Parse("bad.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q: err %v, want it to name %s", tc.yaml, err, tc.field)
		}
	}
}
