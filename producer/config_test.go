package producer

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	neg, big := -0.5, 1.5
	ok := Config{Run: "r1", PromptsFile: "p.jsonl", Model: "m"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"bad run", func(c *Config) { c.Run = "a.b" }, "run name"},
		{"no run", func(c *Config) { c.Run = "" }, "run name"},
		{"no file", func(c *Config) { c.PromptsFile = "" }, "no prompts file"},
		{"no model", func(c *Config) { c.Model = "" }, "no model"},
		{"negative pending", func(c *Config) { c.MaxPending = -1 }, "max pending"},
		{"negative retries", func(c *Config) { c.Retries = -2 }, "retries"},
		{"negative ack timeout", func(c *Config) { c.AckTimeout = -time.Second }, "ack timeout"},
		{"negative max tokens", func(c *Config) { c.Params.MaxTokens = -1 }, "max_tokens"},
		{"negative temperature", func(c *Config) { c.Params.Temperature = &neg }, "temperature"},
		{"top_p above 1", func(c *Config) { c.Params.TopP = &big }, "top_p"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error about %s", err, tc.want)
			}
		})
	}
	d := ok.withDefaults()
	if d.MaxPending != DefaultMaxPending || d.Retries != DefaultRetries || d.AckTimeout != DefaultAckTimeout || d.Logger == nil {
		t.Errorf("defaults not applied: %+v", d)
	}
}
