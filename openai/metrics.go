package openai

import (
	"context"
	"fmt"
	"net/http"
)

// maxMetricsBody bounds a /metrics page: vLLM's is tens of KiB per
// engine, histograms included.
const maxMetricsBody = 8 << 20

// ServerMetrics reads the server's Prometheus metrics, GET <root>/metrics
// (vLLM serves them at the server's root, not under /v1), in the text
// format, sending the same Authorization header as every request. A
// status other than 2xx is returned as an *APIError. Without a deadline
// on ctx it gives up after 10 seconds.
func (c *Client) ServerMetrics(ctx context.Context) ([]byte, error) {
	target := c.ep.root + "/metrics"
	k := c.probe(ctx, "read metrics from "+target)
	defer k.finish()
	resp, err := k.send(http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	defer k.release(resp.Body, true)
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s: %w", k.where, readAPIError(resp, c.keys.secrets()))
	}
	body, err := readBounded(resp.Body, maxMetricsBody)
	if err != nil {
		return nil, k.fail("reading response", err)
	}
	return body, nil
}
