package router

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// proxyMetrics exposes the proxy's atomics as Prometheus metrics at scrape
// time, so the request path pays one atomic add per counter and never
// hashes label values. The cell label takes only the names in the current
// slot map: bounded by it, and a removed cell's series go away with it.
type proxyMetrics struct {
	p *Proxy

	noCell         atomic.Uint64
	badRequests    atomic.Uint64 // refused by the framing checks
	reloadOK       atomic.Uint64
	reloadInvalid  atomic.Uint64
	reloadFailed   atomic.Uint64
	slotMapCurrent atomic.Bool

	requests, up, inflight, rejections, upstreamErrors, ejections *prometheus.Desc
	noCellDesc, reloads, mapCurrent, cellsDesc, badRequestsDesc   *prometheus.Desc
	clientFaults                                                  *prometheus.Desc
}

var codeClasses = [5]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

func newProxyMetrics(p *Proxy) *proxyMetrics {
	m := &proxyMetrics{p: p}
	m.slotMapCurrent.Store(true)
	m.requests = prometheus.NewDesc("cellgate_router_requests_total",
		"Requests the cell router answered or forwarded, by cell and status class (router refusals included; 499: the client went away first).",
		[]string{"cell", "code_class"}, nil)
	m.up = prometheus.NewDesc("cellgate_router_cell_up",
		"1 when the router sends the cell's tenants to it, 0 when it answers them 503.",
		[]string{"cell"}, nil)
	m.inflight = prometheus.NewDesc("cellgate_router_in_flight_requests",
		"Requests the router has in flight to the cell, streams included.",
		[]string{"cell"}, nil)
	m.rejections = prometheus.NewDesc("cellgate_router_rejections_total",
		"Requests the router answered 503 itself: cell down, cell at its concurrency cap, tenant at its router cap (tenant_concurrency), or tenant's slot frozen for a move.",
		[]string{"cell", "reason"}, nil)
	m.upstreamErrors = prometheus.NewDesc("cellgate_router_upstream_errors_total",
		"Transport errors talking to the cell: dial (connection failed), timeout, other.",
		[]string{"cell", "kind"}, nil)
	m.ejections = prometheus.NewDesc("cellgate_router_cell_ejections_total",
		"Times the cell was marked down, by an active health check or by request errors (passive).",
		[]string{"cell", "cause"}, nil)
	m.badRequestsDesc = prometheus.NewDesc("cellgate_router_bad_requests_total",
		"Requests the router refused before routing, as the cells refuse them (httpguard): ambiguous or folded framing, a version other than HTTP/1.x, CONNECT, TRACE or a method that is not an upper-case token, a Connection header naming an identity header.",
		nil, nil)
	m.clientFaults = prometheus.NewDesc("cellgate_router_client_errors_total",
		"Forwarded requests that failed by the client's doing (malformed, stalled or cut body; client gone): answered 400/408 or aborted, never counted against the cell.",
		[]string{"cell"}, nil)
	m.noCellDesc = prometheus.NewDesc("cellgate_router_no_cell_total",
		"Requests without a tenant that found no cell up.", nil, nil)
	m.reloads = prometheus.NewDesc("cellgate_router_slotmap_reloads_total",
		"Slot map file reloads: ok (new map in use), invalid (rejected, last good map kept), unreadable.",
		[]string{"result"}, nil)
	m.mapCurrent = prometheus.NewDesc("cellgate_router_slotmap_current",
		"1 when the map in use is the slot map file's content, 0 when the file is bad and the last good map is kept.",
		nil, nil)
	m.cellsDesc = prometheus.NewDesc("cellgate_router_cells",
		"Cells in the slot map in use.", nil, nil)
	return m
}

// Describe implements prometheus.Collector.
func (m *proxyMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.requests, m.up, m.inflight, m.rejections, m.upstreamErrors,
		m.ejections, m.noCellDesc, m.reloads, m.mapCurrent, m.cellsDesc, m.badRequestsDesc, m.clientFaults} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *proxyMetrics) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	t := m.p.table.Load()
	for _, b := range t.backends {
		for i, c := range codeClasses {
			counter(m.requests, b.codes[i].Load(), b.name, c)
		}
		counter(m.requests, b.clientGone.Load(), b.name, "499")
		up := 0.0
		if b.up.Load() {
			up = 1
		}
		gauge(m.up, up, b.name)
		gauge(m.inflight, float64(b.inflight.Load()), b.name)
		counter(m.rejections, b.rejectDown.Load(), b.name, "down")
		counter(m.rejections, b.rejectBusy.Load(), b.name, "concurrency")
		counter(m.rejections, b.rejectFrozen.Load(), b.name, "frozen")
		counter(m.rejections, b.rejectTenant.Load(), b.name, "tenant_concurrency")
		counter(m.clientFaults, b.clientFaults.Load(), b.name)
		counter(m.upstreamErrors, b.errDial.Load(), b.name, "dial")
		counter(m.upstreamErrors, b.errTimeout.Load(), b.name, "timeout")
		counter(m.upstreamErrors, b.errOther.Load(), b.name, "other")
		counter(m.ejections, b.ejectActive.Load(), b.name, "active")
		counter(m.ejections, b.ejectPassive.Load(), b.name, "passive")
	}
	counter(m.noCellDesc, m.noCell.Load())
	counter(m.badRequestsDesc, m.badRequests.Load())
	counter(m.reloads, m.reloadOK.Load(), "ok")
	counter(m.reloads, m.reloadInvalid.Load(), "invalid")
	counter(m.reloads, m.reloadFailed.Load(), "unreadable")
	cur := 0.0
	if m.slotMapCurrent.Load() {
		cur = 1
	}
	gauge(m.mapCurrent, cur)
	gauge(m.cellsDesc, float64(len(t.backends)))
}
