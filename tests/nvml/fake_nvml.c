/*
 * A fake libnvidia-ml.so.1 for queuepilot's tests: the real nvidia-ml-py (pynvml) calls these symbols
 * through ctypes exactly as it calls the driver's library, so every struct below mirrors pynvml's
 * ctypes layout (nvidia-ml-py 13.x).
 *
 * Build:   gcc -shared -fPIC -O1 -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 fake_nvml.c -lpthread
 * (conftest.py gives the builds it loads in-process another soname; see there why.)
 * Old driver variant (-DOLD_DRIVER): nvmlDeviceGetTotalEnergyConsumption, nvmlDeviceGetTemperatureV and
 * nvmlDeviceGetCurrentClocksEventReasons and the nvmlGpm* calls are not exported, so pynvml raises
 * NVMLError_FunctionNotFound.
 *
 * Scripted by a control file whose path is read from $FAKE_NVML_CONTROL at nvmlInitWithFlags. The file is
 * re-read whenever it changes (inode, size or mtime), so a test rewrites it (write + rename) mid-run.
 * Lines (whitespace separated, '#' starts a comment):
 *   gpus N                          number of GPUs (default 2, at most 16)
 *   driver STRING                   nvmlSystemGetDriverVersion
 *   init_error CODE                 nvmlInitWithFlags returns CODE
 *   driver_not_loaded 0|1           every call returns NVML_ERROR_DRIVER_NOT_LOADED (9)
 *   xid_register CODE               nvmlDeviceRegisterEvents returns CODE (0 = success)
 *   gpu I KEY VALUE                 per-GPU value (keys below; name/uuid take the rest of the line)
 *   mig I SLOT GI_ID PROFILE UUID MEM_TOTAL MEM_USED    a MIG instance in slot SLOT (0..6) of GPU I
 *   xid SEQ GPU CODE                an Xid critical error; delivered once per event set, by increasing SEQ
 *   gpm GPU GI METRIC VALUE         GPM metric METRIC (NVML_GPM_METRIC_*) of GPU (GI -1) or of its MIG GPU instance GI;
 *                                   a metric not listed answers NOT_SUPPORTED in its slot of nvmlGpmMetricsGet
 * Per-GPU keys: name uuid bus util_gpu util_mem mem_total mem_reserved mem_used temp mem_temp power_mw
 *   energy_mj sm_clock mem_clock pcie_replay ecc_sbe_vol ecc_dbe_vol ecc_sbe_agg ecc_dbe_agg remap_corr
 *   remap_unc remap_pending remap_failure clocks_event enc_util dec_util mig_mode (-1 = not MIG capable)
 *   retired_sbe retired_dbe retired_pending recovery_action nvlink_crc_flit nvlink_crc_data nvlink_replay
 *   nvlink_recovery (NVML fields 29 30 31 230 38 45 52 59)
 *   gpm (1: nvmlGpmQueryDeviceSupport says supported; default 0)  gpm_sample_error CODE (nvmlGpmSampleGet and
 *   nvmlGpmMigSampleGet return CODE)  gpm_metrics_error CODE (nvmlGpmMetricsGet returns CODE)
 *   error (every call on this GPU returns this code, e.g. 15 = GPU is lost, 999 = unknown; 0 = none)
 *   not_supported (comma-separated symbol names returning NVML_ERROR_NOT_SUPPORTED on this GPU; the
 *   pseudo-name memory_temp makes field 82 of nvmlDeviceGetFieldValues report NOT_SUPPORTED, field_N field N)
 * Test-only exports: fake_nvml_call_count(symbol, gpu) -> calls so far (gpu -1: all GPUs, and calls
 * without a device); fake_nvml_reset_counts(); fake_nvml_gpm_samples_live() -> GPM samples allocated, not freed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 16
#define MAX_MIG 7
#define MAX_XID 1024
#define MAX_SETS 64
#define NVML_MEMORY_V2 0x02000028u
#define NVML_TEMPERATURE_V1 0x0100000Cu
#define NVML_FI_DEV_MEMORY_TEMP 82
#define MAX_GPM_SAMPLES 512
#define MAX_GPM_VALUES 2048
#define GPM_METRIC_MAX 477
#define XID_CRITICAL 0x8ull

/* ---- structs exactly as pynvml's ctypes definitions ---------------------------------------------- */
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int version; unsigned int sensorType; int temperature; } nvmlTemperature_v1_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;
typedef struct {
    uint32_t fieldId, scopeId;
    int64_t timestamp, latencyUsec;
    unsigned int valueType;
    unsigned int nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct fake_dev { int is_mig, gpu, slot; } fake_dev;
typedef fake_dev *nvmlDevice_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
typedef struct fake_es { int used; unsigned long long mask[MAX_GPUS]; long cursor; } fake_es;
typedef fake_es *nvmlEventSet_t;

/* ---- scripted state -------------------------------------------------------------------------------- */
typedef struct {
    int present;
    unsigned int gi;
    char profile[32], uuid[96];
    unsigned long long mem_total, mem_used;
} mig_cfg;

typedef struct {
    char name[96], uuid[96], not_supported[512];
    unsigned int bus, util_gpu, util_mem, temp, mem_temp, power_mw, sm_clock, mem_clock, pcie_replay;
    unsigned int enc_util, dec_util, remap_corr, remap_unc, remap_pending, remap_failure;
    unsigned int retired_sbe, retired_dbe, retired_pending, recovery_action;
    unsigned long long nvlink_crc_flit, nvlink_crc_data, nvlink_replay, nvlink_recovery;
    int gpm, gpm_sample_error, gpm_metrics_error;
    int mig_mode, error;
    unsigned long long mem_total, mem_reserved, mem_used, energy_mj, ecc[4], clocks_event;
    mig_cfg mig[MAX_MIG];
} gpu_cfg;

typedef struct { long seq; int gpu; unsigned long long code; } xid_cfg;
typedef struct { int gpu, gi; unsigned int metric; double value; } gpm_cfg;

/* GPM structs as pynvml's ctypes definitions */
typedef struct fake_gpm_sample { int used, taken, gpu, gi; long seq; } fake_gpm_sample;
typedef fake_gpm_sample *nvmlGpmSample_t;
typedef struct { const char *shortName, *longName, *unit; } nvmlGpmMetricInfo_t;
typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;
typedef struct {
    unsigned int version, numMetrics;
    nvmlGpmSample_t sample1, sample2;
    nvmlGpmMetric_t metrics[GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;
typedef struct { unsigned int version, isSupportedDevice; } nvmlGpmSupport_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char control_path[4096];
static struct stat control_st;
static int ngpus, init_error, driver_not_loaded, xid_register, nxid, init_count;
static char driver[80];
static gpu_cfg gpus[MAX_GPUS];
static xid_cfg xids[MAX_XID];
static gpm_cfg gpmvals[MAX_GPM_VALUES];
static int ngpm;
static fake_gpm_sample gpm_samples[MAX_GPM_SAMPLES] __attribute__((unused));
static long gpm_seq __attribute__((unused));
static fake_dev devs[MAX_GPUS], migdevs[MAX_GPUS][MAX_MIG];
static fake_es sets[MAX_SETS];

/* call counters by symbol name and GPU (index MAX_GPUS: calls without a GPU) */
#define MAX_FNS 64
static const char *fn_names[MAX_FNS];
static unsigned long fn_calls[MAX_FNS][MAX_GPUS + 1];

static void defaults(void) {
    ngpus = 2;
    init_error = driver_not_loaded = xid_register = nxid = ngpm = 0;
    snprintf(driver, sizeof driver, "550.54.15");
    memset(gpus, 0, sizeof gpus);
    for (int i = 0; i < MAX_GPUS; i++) {
        gpu_cfg *g = &gpus[i];
        snprintf(g->name, sizeof g->name, "NVIDIA H100 80GB HBM3");
        snprintf(g->uuid, sizeof g->uuid, "GPU-00000000-fake-4000-8000-%012x", i);
        g->bus = 0x18 + i;
        g->util_gpu = 40; g->util_mem = 25; g->temp = 45; g->mem_temp = 50; g->power_mw = 250000;
        g->energy_mj = 1000000ull; g->sm_clock = 1980; g->mem_clock = 2619;
        g->mem_total = 80ull << 30; g->mem_reserved = 512ull << 20; g->mem_used = 10ull << 30;
        g->mig_mode = -1;
        devs[i].is_mig = 0; devs[i].gpu = i; devs[i].slot = -1;
        for (int j = 0; j < MAX_MIG; j++) { migdevs[i][j].is_mig = 1; migdevs[i][j].gpu = i; migdevs[i][j].slot = j; }
    }
}

static unsigned long long num(const char *s) { return strtoull(s, NULL, 0); }

static void set_gpu_key(gpu_cfg *g, const char *key, const char *val, const char *rest) {
#define U(k) if (!strcmp(key, #k)) { g->k = (unsigned int)num(val); return; }
#define ULL(k) if (!strcmp(key, #k)) { g->k = num(val); return; }
    U(bus) U(util_gpu) U(util_mem) U(temp) U(mem_temp) U(power_mw) U(sm_clock) U(mem_clock) U(pcie_replay)
    U(enc_util) U(dec_util) U(remap_corr) U(remap_unc) U(remap_pending) U(remap_failure)
    U(retired_sbe) U(retired_dbe) U(retired_pending) U(recovery_action)
    ULL(nvlink_crc_flit) ULL(nvlink_crc_data) ULL(nvlink_replay) ULL(nvlink_recovery)
    ULL(mem_total) ULL(mem_reserved) ULL(mem_used) ULL(energy_mj) ULL(clocks_event)
#undef U
#undef ULL
    if (!strcmp(key, "mig_mode")) { g->mig_mode = atoi(val); return; }
    if (!strcmp(key, "gpm")) { g->gpm = atoi(val); return; }
    if (!strcmp(key, "gpm_sample_error")) { g->gpm_sample_error = atoi(val); return; }
    if (!strcmp(key, "gpm_metrics_error")) { g->gpm_metrics_error = atoi(val); return; }
    if (!strcmp(key, "error")) { g->error = atoi(val); return; }
    if (!strcmp(key, "ecc_sbe_vol")) { g->ecc[0] = num(val); return; }
    if (!strcmp(key, "ecc_dbe_vol")) { g->ecc[1] = num(val); return; }
    if (!strcmp(key, "ecc_sbe_agg")) { g->ecc[2] = num(val); return; }
    if (!strcmp(key, "ecc_dbe_agg")) { g->ecc[3] = num(val); return; }
    if (!strcmp(key, "not_supported")) { snprintf(g->not_supported, sizeof g->not_supported, ",%s,", val); return; }
    if (!strcmp(key, "name")) { snprintf(g->name, sizeof g->name, "%s", rest); return; }
    if (!strcmp(key, "uuid")) { snprintf(g->uuid, sizeof g->uuid, "%s", val); return; }
    fprintf(stderr, "fake_nvml: unknown gpu key %s\n", key);
}

static void parse_line(char *line) {
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    line[strcspn(line, "\r\n")] = 0;
    char *tok[10] = {0};
    int n = 0;
    char *save = NULL, *copy = strdup(line);
    for (char *t = strtok_r(copy, " \t", &save); t && n < 10; t = strtok_r(NULL, " \t", &save)) tok[n++] = t;
    if (n == 0) { free(copy); return; }
    if (!strcmp(tok[0], "gpus") && n >= 2) {
        ngpus = atoi(tok[1]);
        if (ngpus > MAX_GPUS) ngpus = MAX_GPUS;
        if (ngpus < 0) ngpus = 0;
    } else if (!strcmp(tok[0], "driver") && n >= 2) {
        snprintf(driver, sizeof driver, "%s", tok[1]);
    } else if (!strcmp(tok[0], "init_error") && n >= 2) {
        init_error = atoi(tok[1]);
    } else if (!strcmp(tok[0], "driver_not_loaded") && n >= 2) {
        driver_not_loaded = atoi(tok[1]);
    } else if (!strcmp(tok[0], "xid_register") && n >= 2) {
        xid_register = atoi(tok[1]);
    } else if (!strcmp(tok[0], "gpu") && n >= 4) {
        int i = atoi(tok[1]);
        if (i >= 0 && i < MAX_GPUS) {
            /* the rest of the line after the key, for names with spaces */
            const char *rest = strstr(line, tok[2]) + strlen(tok[2]);
            while (*rest == ' ' || *rest == '\t') rest++;
            set_gpu_key(&gpus[i], tok[2], tok[3], rest);
        }
    } else if (!strcmp(tok[0], "mig") && n >= 8) {
        int i = atoi(tok[1]), j = atoi(tok[2]);
        if (i >= 0 && i < MAX_GPUS && j >= 0 && j < MAX_MIG) {
            mig_cfg *m = &gpus[i].mig[j];
            m->present = 1;
            m->gi = (unsigned int)num(tok[3]);
            snprintf(m->profile, sizeof m->profile, "%s", tok[4]);
            snprintf(m->uuid, sizeof m->uuid, "%s", tok[5]);
            m->mem_total = num(tok[6]);
            m->mem_used = num(tok[7]);
        }
    } else if (!strcmp(tok[0], "gpm") && n >= 5 && ngpm < MAX_GPM_VALUES) {
        gpmvals[ngpm].gpu = atoi(tok[1]);
        gpmvals[ngpm].gi = atoi(tok[2]);
        gpmvals[ngpm].metric = (unsigned int)num(tok[3]);
        gpmvals[ngpm].value = strtod(tok[4], NULL);
        ngpm++;
    } else if (!strcmp(tok[0], "xid") && n >= 4 && nxid < MAX_XID) {
        xids[nxid].seq = atol(tok[1]);
        xids[nxid].gpu = atoi(tok[2]);
        xids[nxid].code = num(tok[3]);
        nxid++;
    } else {
        fprintf(stderr, "fake_nvml: bad control line: %s\n", line);
    }
    free(copy);
}

/* Re-read the control file if it changed. Caller holds mu. */
static void reload(void) {
    if (!control_path[0]) return;
    struct stat st;
    if (stat(control_path, &st) != 0) return;
    if (st.st_ino == control_st.st_ino && st.st_size == control_st.st_size &&
        st.st_mtim.tv_sec == control_st.st_mtim.tv_sec && st.st_mtim.tv_nsec == control_st.st_mtim.tv_nsec)
        return;
    FILE *f = fopen(control_path, "r");
    if (!f) return;
    defaults();
    char line[1024];
    while (fgets(line, sizeof line, f)) parse_line(line);
    fclose(f);
    control_st = st;
}

static int fn_id(const char *name) {
    for (int i = 0; i < MAX_FNS; i++) {
        if (fn_names[i] == name || (fn_names[i] && !strcmp(fn_names[i], name))) return i;
        if (!fn_names[i]) { fn_names[i] = name; return i; }
    }
    return MAX_FNS - 1;
}

static int not_supported(const gpu_cfg *g, const char *fn) {
    char needle[128];
    snprintf(needle, sizeof needle, ",%s,", fn);
    return strstr(g->not_supported, needle) != NULL;
}

/* Common prologue for device calls: lock, reload, count, and the scripted error for this GPU. */
static nvmlReturn_t enter(const char *fn, nvmlDevice_t dev) {
    pthread_mutex_lock(&mu);
    reload();
    int gi = MAX_GPUS;
    if (dev && dev->gpu >= 0 && dev->gpu < MAX_GPUS) gi = dev->gpu;
    fn_calls[fn_id(fn)][gi]++;
    if (driver_not_loaded) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (init_count <= 0) return NVML_ERROR_UNINITIALIZED;
    if (!dev) return NVML_SUCCESS;
    if (dev->gpu < 0 || dev->gpu >= ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    gpu_cfg *g = &gpus[dev->gpu];
    if (g->error) return g->error;
    if (not_supported(g, fn)) return NVML_ERROR_NOT_SUPPORTED;
    if (dev->is_mig && !g->mig[dev->slot].present) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

static nvmlReturn_t leave(nvmlReturn_t r) {
    pthread_mutex_unlock(&mu);
    return r;
}

#define ENTER(dev)                            \
    nvmlReturn_t _r = enter(__func__, (dev)); \
    if (_r != NVML_SUCCESS) return leave(_r); \
    gpu_cfg *g = &gpus[(dev)->gpu];              \
    (void)g;
/* calls that take no device */
#define ENTER0()                               \
    nvmlReturn_t _r = enter(__func__, NULL);  \
    if (_r != NVML_SUCCESS) return leave(_r);
/* a call that MIG device handles do not support */
#define PARENT_ONLY(dev) if ((dev)->is_mig) return leave(NVML_ERROR_NOT_SUPPORTED);

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ---- init and system ------------------------------------------------------------------------------- */
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&mu);
    const char *p = getenv("FAKE_NVML_CONTROL");
    snprintf(control_path, sizeof control_path, "%s", p ? p : "");
    memset(&control_st, 0, sizeof control_st);
    defaults();
    reload();
    fn_calls[fn_id(__func__)][MAX_GPUS]++;
    nvmlReturn_t r = driver_not_loaded ? NVML_ERROR_DRIVER_NOT_LOADED : init_error;
    if (r == NVML_SUCCESS) init_count++;
    return leave(r);
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&mu);
    fn_calls[fn_id(__func__)][MAX_GPUS]++;
    if (init_count <= 0) return leave(NVML_ERROR_UNINITIALIZED);
    init_count--;
    return leave(NVML_SUCCESS);
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    default: return "Fake NVML error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER0();
    return leave(copy_str(version, length, driver));
}

/* ---- devices --------------------------------------------------------------------------------------- */
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER0();
    *count = (unsigned int)ngpus;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER0();
    if (index >= (unsigned int)ngpus) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (gpus[index].error) return leave(gpus[index].error);
    *device = &devs[index];
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index) {
    ENTER(dev);
    PARENT_ONLY(dev);
    *index = (unsigned int)dev->gpu;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length) {
    ENTER(dev);
    char buf[160];
    if (dev->is_mig)
        snprintf(buf, sizeof buf, "%s MIG %s", g->name, g->mig[dev->slot].profile);
    else
        snprintf(buf, sizeof buf, "%s", g->name);
    return leave(copy_str(name, length, buf));
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int length) {
    ENTER(dev);
    return leave(copy_str(uuid, length, dev->is_mig ? g->mig[dev->slot].uuid : g->uuid));
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci) {
    ENTER(dev);
    memset(pci, 0, sizeof *pci);
    pci->domain = 0;
    pci->bus = g->bus;
    pci->device = 0;
    pci->pciDeviceId = 0x233010DE;
    pci->pciSubSystemId = 0x16C110DE;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", g->bus);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", g->bus);
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem) {
    ENTER(dev);
    if (dev->is_mig) {
        mig_cfg *m = &g->mig[dev->slot];
        mem->total = m->mem_total; mem->used = m->mem_used; mem->free = m->mem_total - m->mem_used;
    } else {
        /* v1 counts reserved memory as used (R510+ behaviour, gpu-operator#348) */
        mem->total = g->mem_total; mem->used = g->mem_used + g->mem_reserved;
        mem->free = g->mem_total - mem->used;
    }
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *mem) {
    ENTER(dev);
    if (mem->version != NVML_MEMORY_V2) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (dev->is_mig) {
        mig_cfg *m = &g->mig[dev->slot];
        mem->total = m->mem_total; mem->reserved = 0; mem->used = m->mem_used;
        mem->free = m->mem_total - m->mem_used;
    } else {
        mem->total = g->mem_total; mem->reserved = g->mem_reserved; mem->used = g->mem_used;
        mem->free = g->mem_total - g->mem_reserved - g->mem_used;
    }
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *u) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (g->mig_mode == 1) return leave(NVML_ERROR_NOT_SUPPORTED); /* not supported on MIG-enabled GPUs */
    u->gpu = g->util_gpu; u->memory = g->util_mem;
    return leave(NVML_SUCCESS);
}

#ifndef OLD_DRIVER
EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t dev, nvmlTemperature_v1_t *t) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (t->version != NVML_TEMPERATURE_V1) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (t->sensorType != 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    t->temperature = (int)g->temp;
    return leave(NVML_SUCCESS);
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, unsigned int sensor, unsigned int *temp) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (sensor != 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *temp = g->temp;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t dev, int count, nvmlFieldValue_t *values) {
    ENTER(dev);
    PARENT_ONLY(dev);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
        v->latencyUsec = 0;
        char pseudo[32];
        snprintf(pseudo, sizeof pseudo, "field_%u", v->fieldId);
        v->nvmlReturn = NVML_SUCCESS;
        v->valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
        if (not_supported(g, pseudo)) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else if (v->fieldId == NVML_FI_DEV_MEMORY_TEMP && !not_supported(g, "memory_temp")) {
            v->value.uiVal = g->mem_temp;
        } else if (v->fieldId == 29) { v->value.uiVal = g->retired_sbe;
        } else if (v->fieldId == 30) { v->value.uiVal = g->retired_dbe;
        } else if (v->fieldId == 31) { v->value.uiVal = g->retired_pending;
        } else if (v->fieldId == 230) { v->value.uiVal = g->recovery_action;
        } else if (v->fieldId == 38 || v->fieldId == 45 || v->fieldId == 52 || v->fieldId == 59) {
            v->valueType = 3; /* NVML_VALUE_TYPE_UNSIGNED_LONG_LONG */
            v->value.ullVal = v->fieldId == 38 ? g->nvlink_crc_flit : v->fieldId == 45 ? g->nvlink_crc_data
                            : v->fieldId == 52 ? g->nvlink_replay : g->nvlink_recovery;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned int *mw) {
    ENTER(dev);
    PARENT_ONLY(dev);
    *mw = g->power_mw;
    return leave(NVML_SUCCESS);
}

#ifndef OLD_DRIVER
EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t dev, unsigned long long *mj) {
    ENTER(dev);
    PARENT_ONLY(dev);
    *mj = g->energy_mj;
    return leave(NVML_SUCCESS);
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, unsigned int type, unsigned int *mhz) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (type == 1) *mhz = g->sm_clock;        /* NVML_CLOCK_SM */
    else if (type == 2) *mhz = g->mem_clock;  /* NVML_CLOCK_MEM */
    else return leave(NVML_ERROR_INVALID_ARGUMENT);
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t dev, unsigned int *value) {
    ENTER(dev);
    PARENT_ONLY(dev);
    *value = g->pcie_replay;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, unsigned int errorType, unsigned int counterType,
                                                unsigned long long *count) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (errorType > 1 || counterType > 1) return leave(NVML_ERROR_INVALID_ARGUMENT);
    /* ecc[] order: sbe_vol, dbe_vol, sbe_agg, dbe_agg; errorType 0 corrected (SBE), 1 uncorrected (DBE);
       counterType 0 volatile, 1 aggregate */
    *count = g->ecc[counterType * 2 + errorType];
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc,
                                              unsigned int *pending, unsigned int *failure) {
    ENTER(dev);
    PARENT_ONLY(dev);
    *corr = g->remap_corr; *unc = g->remap_unc; *pending = g->remap_pending; *failure = g->remap_failure;
    return leave(NVML_SUCCESS);
}

#ifndef OLD_DRIVER
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev, unsigned long long *reasons) {
    ENTER(dev);
    PARENT_ONLY(dev);
    *reasons = g->clocks_event;
    return leave(NVML_SUCCESS);
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t dev, unsigned long long *reasons) {
    ENTER(dev);
    PARENT_ONLY(dev);
    *reasons = g->clocks_event;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t dev, unsigned int *util, unsigned int *period) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (g->mig_mode == 1) return leave(NVML_ERROR_NOT_SUPPORTED);
    *util = g->enc_util; *period = 167000;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t dev, unsigned int *util, unsigned int *period) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (g->mig_mode == 1) return leave(NVML_ERROR_NOT_SUPPORTED);
    *util = g->dec_util; *period = 167000;
    return leave(NVML_SUCCESS);
}

/* ---- MIG ------------------------------------------------------------------------------------------- */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned int *current, unsigned int *pending) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (g->mig_mode < 0) return leave(NVML_ERROR_NOT_SUPPORTED);
    *current = *pending = (unsigned int)g->mig_mode;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t dev, unsigned int *count) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (g->mig_mode < 0) return leave(NVML_ERROR_NOT_SUPPORTED);
    *count = MAX_MIG;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t dev, unsigned int index, nvmlDevice_t *mig) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (g->mig_mode != 1) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (index >= MAX_MIG) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!g->mig[index].present) return leave(NVML_ERROR_NOT_FOUND);
    *mig = &migdevs[dev->gpu][index];
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t dev, unsigned int *id) {
    ENTER(dev);
    if (!dev->is_mig) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *id = g->mig[dev->slot].gi;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t dev, unsigned int *isMig) {
    ENTER(dev);
    *isMig = (unsigned int)dev->is_mig;
    return leave(NVML_SUCCESS);
}

/* ---- events ---------------------------------------------------------------------------------------- */
EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    ENTER0();
    for (int i = 0; i < MAX_SETS; i++) {
        if (!sets[i].used) {
            memset(&sets[i], 0, sizeof sets[i]);
            sets[i].used = 1;
            *set = &sets[i];
            return leave(NVML_SUCCESS);
        }
    }
    return leave(NVML_ERROR_UNKNOWN);
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t dev, unsigned long long eventTypes, nvmlEventSet_t set) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (!set || !set->used) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (xid_register) return leave(xid_register);
    set->mask[dev->gpu] |= eventTypes;
    return leave(NVML_SUCCESS);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    double deadline = now_ms() + timeoutms;
    for (;;) {
        ENTER0();
        if (!set || !set->used) return leave(NVML_ERROR_INVALID_ARGUMENT);
        int best = -1;
        for (int i = 0; i < nxid; i++) {
            xid_cfg *x = &xids[i];
            if (x->seq <= set->cursor || x->gpu < 0 || x->gpu >= ngpus) continue;
            if (!(set->mask[x->gpu] & XID_CRITICAL)) continue;
            if (best < 0 || x->seq < xids[best].seq) best = i;
        }
        if (best >= 0) {
            xid_cfg *x = &xids[best];
            set->cursor = x->seq;
            memset(data, 0, sizeof *data);
            data->device = &devs[x->gpu];
            data->eventType = XID_CRITICAL;
            data->eventData = x->code;
            data->gpuInstanceId = 0xFFFFFFFFu;
            data->computeInstanceId = 0xFFFFFFFFu;
            return leave(NVML_SUCCESS);
        }
        leave(NVML_SUCCESS);
        double left = deadline - now_ms();
        if (left <= 0) return NVML_ERROR_TIMEOUT;
        sleep_ms(left < 5 ? (long)left + 1 : 5);
    }
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    pthread_mutex_lock(&mu);
    fn_calls[fn_id(__func__)][MAX_GPUS]++;
    if (!set || !set->used) return leave(NVML_ERROR_INVALID_ARGUMENT);
    set->used = 0;
    return leave(NVML_SUCCESS);
}


/* ---- GPM (not in the old-driver variant: drivers before R520 have no GPM symbols) ---------------------- */
#ifndef OLD_DRIVER
#define NVML_GPM_SUPPORT_VERSION 1
#define NVML_GPM_METRICS_GET_VERSION 1

EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t dev, nvmlGpmSupport_t *support) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (!support || support->version != NVML_GPM_SUPPORT_VERSION) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    support->isSupportedDevice = g->gpm ? 1u : 0u;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    ENTER0();
    if (!sample) return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < MAX_GPM_SAMPLES; i++) {
        if (!gpm_samples[i].used) {
            memset(&gpm_samples[i], 0, sizeof gpm_samples[i]);
            gpm_samples[i].used = 1;
            *sample = &gpm_samples[i];
            return leave(NVML_SUCCESS);
        }
    }
    return leave(20); /* NVML_ERROR_MEMORY */
}

EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    pthread_mutex_lock(&mu);
    fn_calls[fn_id(__func__)][MAX_GPUS]++;
    if (!sample || !sample->used) return leave(NVML_ERROR_INVALID_ARGUMENT);
    sample->used = 0;
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t take_sample(const gpu_cfg *g, nvmlDevice_t dev, int gi, nvmlGpmSample_t sample) {
    if (!sample || !sample->used) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->gpm) return NVML_ERROR_NOT_SUPPORTED;
    if (g->gpm_sample_error) return g->gpm_sample_error;
    sample->taken = 1;
    sample->gpu = dev->gpu;
    sample->gi = gi;
    sample->seq = ++gpm_seq;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t dev, nvmlGpmSample_t sample) {
    ENTER(dev);
    PARENT_ONLY(dev);
    return leave(take_sample(g, dev, -1, sample));
}

EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t dev, unsigned int gpuInstanceId, nvmlGpmSample_t sample) {
    ENTER(dev);
    PARENT_ONLY(dev);
    if (g->mig_mode != 1) return leave(NVML_ERROR_INVALID_ARGUMENT);
    int found = 0;
    for (int j = 0; j < MAX_MIG; j++) found |= g->mig[j].present && g->mig[j].gi == gpuInstanceId;
    if (!found) return leave(NVML_ERROR_NOT_FOUND);
    return leave(take_sample(g, dev, (int)gpuInstanceId, sample));
}

EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
    ENTER0();
    if (!m || m->version != NVML_GPM_METRICS_GET_VERSION) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    nvmlGpmSample_t a = m->sample1, b = m->sample2;
    if (!a || !b || !a->used || !b->used || !a->taken || !b->taken) return leave(NVML_ERROR_INVALID_ARGUMENT);
    /* both samples of the same device or GPU instance, the first taken before the second */
    if (a->gpu != b->gpu || a->gi != b->gi || a->seq >= b->seq) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (a->gpu < 0 || a->gpu >= ngpus) return leave(NVML_ERROR_INVALID_ARGUMENT);
    fn_calls[fn_id("nvmlGpmMetricsGet@gpu")][a->gpu]++;
    const gpu_cfg *g = &gpus[a->gpu];
    if (g->error) return leave(g->error);
    if (g->gpm_metrics_error) return leave(g->gpm_metrics_error);
    if (m->numMetrics > GPM_METRIC_MAX) return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned int i = 0; i < m->numMetrics; i++) {
        nvmlGpmMetric_t *x = &m->metrics[i];
        x->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        x->value = 0;
        x->metricInfo.shortName = x->metricInfo.longName = x->metricInfo.unit = NULL;
        for (int k = 0; k < ngpm; k++) {
            if (gpmvals[k].gpu == a->gpu && gpmvals[k].gi == a->gi && gpmvals[k].metric == x->metricId) {
                x->nvmlReturn = NVML_SUCCESS;
                x->value = gpmvals[k].value;
            }
        }
    }
    return leave(NVML_SUCCESS);
}
#endif

/* ---- test-only ------------------------------------------------------------------------------------- */
EXPORT unsigned long fake_nvml_call_count(const char *fn, int gpu) {
    pthread_mutex_lock(&mu);
    unsigned long total = 0;
    for (int i = 0; i < MAX_FNS && fn_names[i]; i++) {
        if (strcmp(fn_names[i], fn)) continue;
        if (gpu >= 0 && gpu < MAX_GPUS) total = fn_calls[i][gpu];
        else for (int j = 0; j <= MAX_GPUS; j++) total += fn_calls[i][j];
    }
    pthread_mutex_unlock(&mu);
    return total;
}

EXPORT int fake_nvml_gpm_samples_live(void) {
    pthread_mutex_lock(&mu);
    int n = 0;
    for (int i = 0; i < MAX_GPM_SAMPLES; i++) n += gpm_samples[i].used;
    pthread_mutex_unlock(&mu);
    return n;
}

EXPORT void fake_nvml_reset_counts(void) {
    pthread_mutex_lock(&mu);
    memset(fn_calls, 0, sizeof fn_calls);
    pthread_mutex_unlock(&mu);
}
