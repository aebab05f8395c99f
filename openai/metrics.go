package openai

import (
	"context"
	"fmt"
	"net/http"
)

// maxMetricsBody bounds a /metrics page: vLLM's is tens of KiB per
// engine, histograms included.
const maxMetricsBody = 8 << 20

// ServerMetrics reads the server's Prometheus metrics in the text
// format, at Dialect.MetricsPath (vLLM serves them at the server's root,
// /metrics, not under /v1), sending the same Authorization header as
// every request. A status other than 2xx is returned as an *APIError.
// Without a deadline on ctx it gives up after 10 seconds.
func (c *Client) ServerMetrics(ctx context.Context) ([]byte, error) {
	path := c.dialect.MetricsPath
	if path == "" {
		path = "/metrics"
	}
	body, _, err := c.ServerPage(ctx, path)
	return body, err
}

// ServerPage reads a page the server serves outside the OpenAI API, GET
// <root><path> (path begins with a slash): metrics, or an engine's own
// description of itself such as SGLang's /get_server_info. It returns
// the body and the response headers; a status other than 2xx is
// returned as an *APIError, whose Status a caller can read to tell "not
// served here" (404) from a failure. Without a deadline on ctx it gives
// up after 10 seconds.
func (c *Client) ServerPage(ctx context.Context, path string) ([]byte, http.Header, error) {
	target := c.ep.root + path
	k := c.probe(ctx, "read "+target)
	defer k.finish()
	resp, err := k.send(http.MethodGet, target, nil)
	if err != nil {
		return nil, nil, err
	}
	defer k.release(resp.Body, true)
	if resp.StatusCode/100 != 2 {
		return nil, resp.Header, fmt.Errorf("%s: %w", k.where, readAPIError(resp, c.keys.secrets()))
	}
	body, err := readBounded(resp.Body, maxMetricsBody)
	if err != nil {
		return nil, resp.Header, k.fail("reading response", err)
	}
	return body, resp.Header, nil
}
