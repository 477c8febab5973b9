/*
 * A fake NVML (libnvidia-ml.so.1) for testing spanprof's NVML backend without a GPU.
 *
 * Build:   cc -shared -fPIC -o libnvidia-ml.so.1 fake_nvml.c -lpthread -ldl
 * Variants (compile-time): -DOMIT_ENERGY    no nvmlDeviceGetTotalEnergyConsumption symbol
 *                          -DOMIT_SHUTDOWN  no nvmlShutdown symbol
 *                          -DOMIT_INIT      no nvmlInit_v2 / nvmlInitWithFlags symbols
 *
 * Every value is read when the function is called, from
 *   1. the file `fake_nvml.conf` in the directory this library was loaded from, lines
 *      `KEY=VALUE` (a `FAKE_NVML_` prefix on KEY is allowed; `#` starts a comment line;
 *      the last line for a key wins), then
 *   2. the environment variable `FAKE_NVML_KEY`, then
 *   3. the default below.
 * The file lets parallel tests each load their own copy of the library with their own values
 * (environment variables are process-wide); the variables are handy for demos.
 * `KEY_<i>` (e.g. NAME_1) overrides KEY for device i.
 *
 *   DEVICES          device count                          1
 *   NAME             product name                          "Fake NVML GPU"
 *   UUID             uuid                                  "GPU-fake-<i>"
 *   MEM_TOTAL        bytes                                 17179869184 (16 GiB)
 *   MEM_USED         bytes                                 1073741824 (1 GiB)
 *   MEM_RESERVED     bytes                                 0
 *   UTIL             GPU utilisation %                     50
 *   MEM_UTIL         memory utilisation %                  20
 *   POWER_MW         power draw, mW                        100000
 *   POWER_LIMIT_MW   power management limit, mW            300000
 *   TEMP_C           GPU temperature, °C                   60
 *   SM_CLOCK_MHZ     SM (and graphics) clock               1500
 *   MEM_CLOCK_MHZ    memory clock                          5000
 *   COMPUTE_PROCS    `pid:bytes,...`, pid `self` = the     (none)
 *   GRAPHICS_PROCS   calling process, bytes `na` = not available
 *   DRIVER_VERSION   driver version string                 "550.54.15"
 *   INIT_ERROR       nvmlReturn_t for nvmlInit_v2 to fail  0 (e.g. 9 = driver not loaded)
 *   FAIL             comma list of functions returning NVML_ERROR_NOT_SUPPORTED: count, handle,
 *                    name, uuid, memory, util, power, energy, temperature, clock, power_limit,
 *                    compute_procs, graphics_procs, or all
 *
 * The energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ) starts at 0 at nvmlInit_v2 and
 * grows at POWER_MW over CLOCK_MONOTONIC time: each call adds POWER_MW (as read then) times the
 * time since the previous call, kept exactly in mW·µs.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

#define MAX_DEVICES 64
#define MAX_PROCS 64
#define VALUE_LEN 256

typedef struct nvmlDevice_st {
    unsigned index;
} *nvmlDevice_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 ((unsigned)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct {
    unsigned gpu, memory;
} nvmlUtilization_t;

/* nvmlProcessInfo_v2_t: the layout of the _v2 and _v3 process queries. */
typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId;
    unsigned computeInstanceId;
} nvmlProcessInfo_t;

static struct nvmlDevice_st devices[MAX_DEVICES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static unsigned long long energy_last_ns[MAX_DEVICES];
static unsigned long long energy_mw_us[MAX_DEVICES];

/* ---- configuration ---------------------------------------------------------------------- */

static unsigned long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void trim(char *s) {
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
}

/* Looks `key` up in fake_nvml.conf next to this library; returns 1 and fills `out` if found. */
static int from_file(const char *key, char *out, size_t out_len) {
    Dl_info info;
    char path[4096], line[1024];
    int found = 0;
    if (!dladdr((void *)&from_file, &info) || !info.dli_fname)
        return 0;
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash)
        snprintf(path, sizeof path, "%.*s/fake_nvml.conf", (int)(slash - info.dli_fname),
                 info.dli_fname);
    else
        snprintf(path, sizeof path, "fake_nvml.conf");
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        char *k = line;
        while (*k == ' ' || *k == '\t')
            k++;
        if (*k == '#' || *k == '\0')
            continue;
        char *eq = strchr(k, '=');
        if (!eq)
            continue;
        *eq = '\0';
        trim(k);
        if (strncmp(k, "FAKE_NVML_", 10) == 0)
            k += 10;
        if (strcmp(k, key) != 0)
            continue;
        snprintf(out, out_len, "%s", eq + 1);
        trim(out);
        found = 1; /* keep going: the last line wins */
    }
    fclose(f);
    return found;
}

static int lookup_one(const char *key, char *out, size_t out_len) {
    char var[128];
    if (from_file(key, out, out_len))
        return 1;
    snprintf(var, sizeof var, "FAKE_NVML_%s", key);
    const char *v = getenv(var);
    if (!v)
        return 0;
    snprintf(out, out_len, "%s", v);
    return 1;
}

/* KEY_<dev>, then KEY. dev < 0: KEY only. */
static int lookup(const char *key, int dev, char *out, size_t out_len) {
    if (dev >= 0) {
        char k[128];
        snprintf(k, sizeof k, "%s_%d", key, dev);
        if (lookup_one(k, out, out_len))
            return 1;
    }
    return lookup_one(key, out, out_len);
}

static unsigned long long get_u64(const char *key, int dev, unsigned long long dflt) {
    char v[VALUE_LEN];
    if (!lookup(key, dev, v, sizeof v))
        return dflt;
    return strtoull(v, NULL, 10);
}

static int failing(const char *what, int dev) {
    char v[VALUE_LEN];
    if (!lookup("FAIL", dev, v, sizeof v))
        return 0;
    for (char *save = NULL, *tok = strtok_r(v, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
        if (strcmp(tok, what) == 0 || strcmp(tok, "all") == 0)
            return 1;
    return 0;
}

static unsigned device_count(void) {
    unsigned long long n = get_u64("DEVICES", -1, 1);
    return n > MAX_DEVICES ? MAX_DEVICES : (unsigned)n;
}

/* The device's index, or -1 if the handle is not one of ours. */
static int dev_index(nvmlDevice_t d) {
    if (d < devices || d >= devices + MAX_DEVICES)
        return -1;
    if (d->index >= device_count())
        return -1;
    return (int)d->index;
}

static nvmlReturn_t copy_string(const char *s, char *out, unsigned len) {
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

/* Checks shared by every device query; sets *i to the device index. */
#define DEVICE_CALL(handle, what, out)                                                        \
    int i = dev_index(handle);                                                                \
    if (init_count <= 0)                                                                      \
        return NVML_ERROR_UNINITIALIZED;                                                      \
    if (i < 0 || !(out))                                                                      \
        return NVML_ERROR_INVALID_ARGUMENT;                                                   \
    if (failing(what, i))                                                                     \
        return NVML_ERROR_NOT_SUPPORTED;

/* ---- init / shutdown -------------------------------------------------------------------- */

#ifndef OMIT_INIT
static nvmlReturn_t do_init(void) {
    nvmlReturn_t err = (nvmlReturn_t)get_u64("INIT_ERROR", -1, 0);
    if (err != NVML_SUCCESS)
        return err;
    pthread_mutex_lock(&lock);
    if (init_count++ == 0) {
        unsigned long long t = now_ns();
        for (unsigned i = 0; i < MAX_DEVICES; i++) {
            devices[i].index = i;
            energy_last_ns[i] = t;
            energy_mw_us[i] = 0;
        }
    }
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return do_init(); }
nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    return do_init();
}
#endif

#ifndef OMIT_SHUTDOWN
nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t r = init_count > 0 ? (init_count--, NVML_SUCCESS) : NVML_ERROR_UNINITIALIZED;
    pthread_mutex_unlock(&lock);
    return r;
}
#endif

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned len) {
    char v[VALUE_LEN];
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!lookup("DRIVER_VERSION", -1, v, sizeof v))
        snprintf(v, sizeof v, "550.54.15");
    return copy_string(v, version, len);
}

/* ---- devices ---------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (failing("count", -1))
        return NVML_ERROR_NOT_SUPPORTED;
    *count = device_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
    if (init_count <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= device_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    if (failing("handle", (int)index))
        return NVML_ERROR_NOT_SUPPORTED;
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned len) {
    DEVICE_CALL(device, "name", name)
    char v[VALUE_LEN];
    if (!lookup("NAME", i, v, sizeof v))
        snprintf(v, sizeof v, "Fake NVML GPU");
    return copy_string(v, name, len);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned len) {
    DEVICE_CALL(device, "uuid", uuid)
    char v[VALUE_LEN];
    if (!lookup("UUID", i, v, sizeof v))
        snprintf(v, sizeof v, "GPU-fake-%d", i);
    return copy_string(v, uuid, len);
}

static void memory(int i, unsigned long long *total, unsigned long long *reserved,
                   unsigned long long *used, unsigned long long *free_) {
    *total = get_u64("MEM_TOTAL", i, 17179869184ull);
    *reserved = get_u64("MEM_RESERVED", i, 0);
    *used = get_u64("MEM_USED", i, 1073741824ull);
    *free_ = *total > *used + *reserved ? *total - *used - *reserved : 0;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m) {
    DEVICE_CALL(device, "memory", m)
    unsigned long long reserved;
    memory(i, &m->total, &reserved, &m->used, &m->free);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m) {
    DEVICE_CALL(device, "memory", m)
    if (m->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory(i, &m->total, &m->reserved, &m->used, &m->free);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
    DEVICE_CALL(device, "util", u)
    u->gpu = (unsigned)get_u64("UTIL", i, 50);
    u->memory = (unsigned)get_u64("MEM_UTIL", i, 20);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned *power) {
    DEVICE_CALL(device, "power", power)
    *power = (unsigned)get_u64("POWER_MW", i, 100000);
    return NVML_SUCCESS;
}

#ifndef OMIT_ENERGY
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *mj) {
    DEVICE_CALL(device, "energy", mj)
    unsigned long long power = get_u64("POWER_MW", i, 100000);
    pthread_mutex_lock(&lock);
    unsigned long long t = now_ns();
    unsigned long long dt_us = t > energy_last_ns[i] ? (t - energy_last_ns[i]) / 1000 : 0;
    energy_last_ns[i] += dt_us * 1000; /* the sub-µs rest counts next time */
    energy_mw_us[i] += power * dt_us;
    *mj = energy_mw_us[i] / 1000000;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned *temp) {
    DEVICE_CALL(device, "temperature", temp)
    if (sensor != 0 /* NVML_TEMPERATURE_GPU */)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = (unsigned)get_u64("TEMP_C", i, 60);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned *clock) {
    DEVICE_CALL(device, "clock", clock)
    switch (type) {
    case 0: /* NVML_CLOCK_GRAPHICS */
    case 1: /* NVML_CLOCK_SM */
        *clock = (unsigned)get_u64("SM_CLOCK_MHZ", i, 1500);
        return NVML_SUCCESS;
    case 2: /* NVML_CLOCK_MEM */
        *clock = (unsigned)get_u64("MEM_CLOCK_MHZ", i, 5000);
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned *limit) {
    DEVICE_CALL(device, "power_limit", limit)
    *limit = (unsigned)get_u64("POWER_LIMIT_MW", i, 300000);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned *limit) {
    return nvmlDeviceGetPowerManagementLimit(device, limit);
}

/* ---- processes -------------------------------------------------------------------------- */

/* Parses `pid:bytes,...` into procs; returns the count. */
static unsigned parse_procs(const char *key, int dev, nvmlProcessInfo_t *procs) {
    char v[VALUE_LEN];
    unsigned n = 0;
    if (!lookup(key, dev, v, sizeof v))
        return 0;
    for (char *save = NULL, *tok = strtok_r(v, ", ", &save); tok && n < MAX_PROCS;
         tok = strtok_r(NULL, ", ", &save)) {
        char *colon = strchr(tok, ':');
        if (!colon)
            continue;
        *colon = '\0';
        procs[n].pid = strcmp(tok, "self") == 0 ? (unsigned)getpid() : (unsigned)strtoul(tok, NULL, 10);
        procs[n].usedGpuMemory =
            strcmp(colon + 1, "na") == 0 ? ~0ull /* NVML_VALUE_NOT_AVAILABLE */
                                         : strtoull(colon + 1, NULL, 10);
        procs[n].gpuInstanceId = ~0u;
        procs[n].computeInstanceId = ~0u;
        n++;
    }
    return n;
}

static nvmlReturn_t processes(nvmlDevice_t device, const char *what, const char *key,
                              unsigned *count, nvmlProcessInfo_t *infos) {
    DEVICE_CALL(device, what, count)
    nvmlProcessInfo_t procs[MAX_PROCS];
    unsigned n = parse_procs(key, i, procs);
    if (!infos || *count < n) {
        *count = n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(infos, procs, n * sizeof *procs);
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *count,
                                                     nvmlProcessInfo_t *infos) {
    return processes(d, "compute_procs", "COMPUTE_PROCS", count, infos);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned *count,
                                                     nvmlProcessInfo_t *infos) {
    return processes(d, "compute_procs", "COMPUTE_PROCS", count, infos);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned *count,
                                                      nvmlProcessInfo_t *infos) {
    return processes(d, "graphics_procs", "GRAPHICS_PROCS", count, infos);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned *count,
                                                      nvmlProcessInfo_t *infos) {
    return processes(d, "graphics_procs", "GRAPHICS_PROCS", count, infos);
}
