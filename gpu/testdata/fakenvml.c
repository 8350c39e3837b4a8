/*
 * A fake libnvidia-ml for gpu's tests: the NVML functions asyncrl calls,
 * with NVML's prototypes and structs (nvml.h, NVML API 13, as shipped in
 * github.com/NVIDIA/go-nvml v0.13.4-1 pkg/nvml/nvml.h), answering fixed
 * readings for three devices: 0 reads everything, 1 has no power reading
 * (NOT_SUPPORTED, as some boards), 2 is listed but cannot be opened
 * (GPU_IS_LOST). Built by the test with:
 *   -DLOG_PATH="file"   every call appends its name to file
 *   -DINIT_RET=n        nvmlInit_v2 returns n (default 0, SUCCESS)
 *   -DOMIT_TEMPERATURE  the library does not export nvmlDeviceGetTemperature
 */
#include <stdio.h>
#include <string.h>

#ifndef INIT_RET
#define INIT_RET 0
#endif

typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct { unsigned int gpu, memory; } util_t;
typedef struct {
	const char *uuid, *name;
	mem_t mem;
	util_t util;
	unsigned int temp, power_mw, sm_mhz, mem_mhz;
	int no_power;
} dev_t_;

static dev_t_ devs[2] = {
	{"GPU-fake-0000", "Fake H100", {85899345920ULL, 84825604096ULL, 1073741824ULL}, {42, 17}, 55, 123456, 1980, 2619, 0},
	{"GPU-fake-0001", "Fake A100", {42949672960ULL, 40802189312ULL, 2147483648ULL}, {0, 0}, 40, 0, 1410, 1215, 1},
};

static int initialised;

static void logcall(const char *name) {
	FILE *f = fopen(LOG_PATH, "a");
	if (f) {
		fprintf(f, "%s\n", name);
		fclose(f);
	}
}

static int copy_text(const char *s, char *buf, unsigned int n) {
	if (strlen(s) + 1 > n) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
	strcpy(buf, s);
	return 0;
}

static dev_t_ *dev(void *d) {
	if (d != &devs[0] && d != &devs[1]) return 0;
	return (dev_t_ *)d;
}

int nvmlInit_v2(void) {
	logcall("nvmlInit_v2");
	initialised = INIT_RET == 0;
	return INIT_RET;
}

int nvmlShutdown(void) {
	logcall("nvmlShutdown");
	if (!initialised) return 1;
	initialised = 0;
	return 0;
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
	logcall("nvmlDeviceGetCount_v2");
	if (!initialised) return 1;
	*count = 3;
	return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **d) {
	logcall("nvmlDeviceGetHandleByIndex_v2");
	if (!initialised) return 1;
	if (i >= 2) return 15; /* NVML_ERROR_GPU_IS_LOST */
	*d = &devs[i];
	return 0;
}

int nvmlSystemGetDriverVersion(char *buf, unsigned int n) {
	logcall("nvmlSystemGetDriverVersion");
	return copy_text("570.00-fake", buf, n);
}

int nvmlDeviceGetUUID(void *d, char *buf, unsigned int n) {
	logcall("nvmlDeviceGetUUID");
	return dev(d) ? copy_text(dev(d)->uuid, buf, n) : 2;
}

int nvmlDeviceGetName(void *d, char *buf, unsigned int n) {
	logcall("nvmlDeviceGetName");
	return dev(d) ? copy_text(dev(d)->name, buf, n) : 2;
}

int nvmlDeviceGetMemoryInfo(void *d, mem_t *m) {
	logcall("nvmlDeviceGetMemoryInfo");
	if (!dev(d)) return 2;
	*m = dev(d)->mem;
	return 0;
}

int nvmlDeviceGetUtilizationRates(void *d, util_t *u) {
	logcall("nvmlDeviceGetUtilizationRates");
	if (!dev(d)) return 2;
	*u = dev(d)->util;
	return 0;
}

#ifndef OMIT_TEMPERATURE
int nvmlDeviceGetTemperature(void *d, int sensor, unsigned int *t) {
	logcall("nvmlDeviceGetTemperature");
	if (!dev(d) || sensor != 0) return 2;
	*t = dev(d)->temp;
	return 0;
}
#endif

int nvmlDeviceGetPowerUsage(void *d, unsigned int *mw) {
	logcall("nvmlDeviceGetPowerUsage");
	if (!dev(d)) return 2;
	if (dev(d)->no_power) return 3; /* NVML_ERROR_NOT_SUPPORTED */
	*mw = dev(d)->power_mw;
	return 0;
}

int nvmlDeviceGetClockInfo(void *d, int type, unsigned int *mhz) {
	logcall("nvmlDeviceGetClockInfo");
	if (!dev(d)) return 2;
	switch (type) {
	case 1: *mhz = dev(d)->sm_mhz; return 0;  /* NVML_CLOCK_SM */
	case 2: *mhz = dev(d)->mem_mhz; return 0; /* NVML_CLOCK_MEM */
	}
	return 2;
}
