/*
 * A fake CUDA driver (libcuda.so.1) for testing spanprof's GPU time per span without a GPU:
 * the driver functions spanprof calls, with scripted event times.
 *
 * Build:   cc -shared -fPIC -o libcuda.so.1 fake_cuda.c -lpthread -ldl
 *
 * Configuration, read once at cuInit from the file `fake_cuda.conf` in the directory this
 * library was loaded from (lines `KEY=VALUE`; `#` starts a comment line), so that parallel
 * tests each load their own copy with their own script:
 *
 *   INIT_ERROR      CUresult cuInit returns                          0 (100: no device)
 *   NO_CONTEXT      1: no current context (cuCtxGetCurrent gives     0
 *                   NULL, cuEventCreate fails with 201)
 *   NEVER_COMPLETE  1: cuEventQuery always says CUDA_ERROR_NOT_READY  0
 *   ADVANCE_US      comma list: before the k-th cuEventRecord call   0
 *                   (from 0), the GPU clock advances by entry
 *                   k mod the list's length, µs; the event takes the
 *                   clock's time
 *
 * cuEventElapsedTime(end) - (start) is then exact: the script decides every span's GPU time.
 * Counters for tests: fake_cuda_records() (cuEventRecord calls), fake_cuda_live_events()
 * (events created and not destroyed).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NOT_READY 600

#define MAX_STEPS 256

typedef struct fake_event {
    double t_us;
    int recorded;
} *CUevent;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialised;
static int init_error;
static int no_context;
static int never_complete;
static double steps[MAX_STEPS];
static int n_steps;
static double clock_us;
static long records;
static long live_events;
/* A context handle: any non-NULL pointer. */
static int the_context;

static void read_config(void) {
    Dl_info info;
    char path[4096];
    if (!dladdr((void *)&read_config, &info) || !info.dli_fname)
        return;
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash)
        snprintf(path, sizeof path, "%.*s/fake_cuda.conf", (int)(slash - info.dli_fname),
                 info.dli_fname);
    else
        snprintf(path, sizeof path, "fake_cuda.conf");
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] == '#' || !strchr(line, '='))
            continue;
        char *value = strchr(line, '=');
        *value++ = 0;
        if (!strcmp(line, "INIT_ERROR"))
            init_error = atoi(value);
        else if (!strcmp(line, "NO_CONTEXT"))
            no_context = atoi(value);
        else if (!strcmp(line, "NEVER_COMPLETE"))
            never_complete = atoi(value);
        else if (!strcmp(line, "ADVANCE_US")) {
            n_steps = 0;
            for (char *tok = strtok(value, ","); tok && n_steps < MAX_STEPS;
                 tok = strtok(NULL, ","))
                steps[n_steps++] = atof(tok);
        }
    }
    fclose(f);
}

CUresult cuInit(unsigned flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    if (!initialised) {
        read_config();
        initialised = 1;
    }
    CUresult r = init_error;
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuCtxGetCurrent(void **ctx) {
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    *ctx = no_context ? NULL : (void *)&the_context;
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *event, unsigned flags) {
    (void)flags;
    if (!event)
        return CUDA_ERROR_INVALID_VALUE;
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (no_context)
        return CUDA_ERROR_INVALID_CONTEXT;
    *event = calloc(1, sizeof **event);
    pthread_mutex_lock(&lock);
    live_events++;
    pthread_mutex_unlock(&lock);
    return *event ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuEventRecord(CUevent event, void *stream) {
    (void)stream;
    if (!event)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (n_steps > 0)
        clock_us += steps[records % n_steps];
    records++;
    event->t_us = clock_us;
    event->recorded = 1;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent event) {
    if (!event)
        return CUDA_ERROR_INVALID_VALUE;
    return never_complete ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
    if (!ms || !start || !end || !start->recorded || !end->recorded)
        return CUDA_ERROR_INVALID_VALUE;
    if (never_complete)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((end->t_us - start->t_us) / 1000.0);
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent event) {
    if (!event)
        return CUDA_ERROR_INVALID_VALUE;
    free(event);
    pthread_mutex_lock(&lock);
    live_events--;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    if (!text)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *text = "no error"; break;
    case 100: *text = "no CUDA-capable device is detected"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *text = "invalid device context"; break;
    case CUDA_ERROR_NOT_READY: *text = "device not ready"; break;
    default: *text = "unknown error"; break;
    }
    return CUDA_SUCCESS;
}

long fake_cuda_records(void) { return records; }
long fake_cuda_live_events(void) { return live_events; }
