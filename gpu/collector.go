package gpu

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports a Source as Prometheus gauges, reading it on every
// scrape so the numbers are as fresh as the scrape interval and nothing
// polls NVML between scrapes.
type Collector struct {
	src Source

	available, info                     *prometheus.Desc
	util, memUtil, memUsed, memTotal    *prometheus.Desc
	temp, power, smClock, memClockHertz *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector over src; register it on the caller's
// prometheus.Registerer.
func NewCollector(src Source) *Collector {
	dev := []string{"gpu", "uuid"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("asyncrl_gpu_"+name, help, labels, nil)
	}
	return &Collector{
		src:           src,
		available:     d("available", "1 if NVML is loaded and readable on this node, else 0.", nil),
		info:          d("info", "GPU present, with its name; always 1.", []string{"gpu", "uuid", "name"}),
		util:          d("utilization_ratio", "Fraction of the last sample period in which a kernel was running.", dev),
		memUtil:       d("memory_utilization_ratio", "Fraction of the last sample period in which device memory was read or written.", dev),
		memUsed:       d("memory_used_bytes", "Device memory in use.", dev),
		memTotal:      d("memory_total_bytes", "Device memory installed.", dev),
		temp:          d("temperature_celsius", "GPU die temperature.", dev),
		power:         d("power_watts", "Board power draw.", dev),
		smClock:       d("sm_clock_hertz", "Current SM clock.", dev),
		memClockHertz: d("memory_clock_hertz", "Current memory clock.", dev),
	}
}

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.available, c.info, c.util, c.memUtil, c.memUsed, c.memTotal, c.temp, c.power, c.smClock, c.memClockHertz} {
		ch <- d
	}
}

// Collect reads the source once. Without NVML only asyncrl_gpu_available 0
// is sent; readings a device does not support are left out, not sent as 0.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Snapshot()
	if !s.Available {
		ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, 1)
	for _, t := range s.Devices {
		idx := strconv.Itoa(t.Index)
		gauge := func(d *prometheus.Desc, field string, v float64) {
			if t.Has(field) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, idx, t.UUID)
			}
		}
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, idx, t.UUID, t.Name)
		gauge(c.util, "utilization", t.Utilization)
		gauge(c.memUtil, "utilization", t.MemoryUtilization)
		gauge(c.memUsed, "memory", float64(t.MemoryUsedBytes))
		gauge(c.memTotal, "memory", float64(t.MemoryTotalBytes))
		gauge(c.temp, "temperature", t.TemperatureC)
		gauge(c.power, "power", t.PowerW)
		gauge(c.smClock, "sm_clock", t.SMClockMHz*1e6)
		gauge(c.memClockHertz, "mem_clock", t.MemClockMHz*1e6)
	}
}
