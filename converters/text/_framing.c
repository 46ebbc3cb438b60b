/* TFRecord framing for the `_records` module's serializer: see below. */
#include "_records.h" /* Python.h first */

#include <stdint.h>
#include <string.h>

/* TFRecord framing: each record as [length u64][masked CRC32C of the length][data][masked
 * CRC32C of the data], little-endian. CRC32C (Castagnoli) by the SSE 4.2 instruction where
 * the CPU has it, else by tables (slicing by 8); either gives the same bytes. */
static uint32_t CRC_TABLE[8][256];
static int CRC_HAS_HARDWARE; /* asked once, at import: CPUID traps to the host in a VM */

static uint32_t crc_tables(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = CRC_TABLE[7][lo & 0xff] ^ CRC_TABLE[6][(lo >> 8) & 0xff] ^
            CRC_TABLE[5][(lo >> 16) & 0xff] ^ CRC_TABLE[4][lo >> 24] ^ CRC_TABLE[3][p[4]] ^
            CRC_TABLE[2][p[5]] ^ CRC_TABLE[1][p[6]] ^ CRC_TABLE[0][p[7]];
    }
    while (n--) c = CRC_TABLE[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <nmmintrin.h>
#define CRC_HARDWARE 1
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(const unsigned char *p, size_t n) {
    uint64_t c = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#else
#define CRC_HARDWARE 0
#endif


/* By CPUID itself: __builtin_cpu_supports needs a symbol from libgcc that Apple's toolchain
 * does not provide. */
static int crc_has_hardware(void) {
#if CRC_HARDWARE
    unsigned int a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2);
#else
    return 0;
#endif
}

void feedgpu_crc_init(void) {
    CRC_HAS_HARDWARE = crc_has_hardware();
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        CRC_TABLE[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            CRC_TABLE[t][i] = (CRC_TABLE[t - 1][i] >> 8) ^ CRC_TABLE[0][CRC_TABLE[t - 1][i] & 0xff];
}

static uint32_t crc32c(const unsigned char *p, size_t n, int hardware) {
#if CRC_HARDWARE
    if (hardware) return crc_sse42(p, n);
#endif
    return crc_tables(p, n);
}

static unsigned char *put_masked(unsigned char *o, uint32_t crc) {
    uint32_t m = ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
    for (int k = 0; k < 4; k++) *o++ = (unsigned char)(m >> (8 * k));
    return o;
}

void feedgpu_frame_at(unsigned char *o, size_t n) {
    for (int k = 0; k < 8; k++) o[k] = (unsigned char)((uint64_t)n >> (8 * k));
    put_masked(o + 8, crc32c(o, 8, CRC_HAS_HARDWARE));
    put_masked(o + 12 + n, crc32c(o + 12, n, CRC_HAS_HARDWARE));
}

PyObject *feedgpu_crc32c(PyObject *self, PyObject *args) {
    Py_buffer data;
    int hardware;
    if (!PyArg_ParseTuple(args, "y*p", &data, &hardware)) return NULL;
    uint32_t crc = crc32c(data.buf, (size_t)data.len, hardware && CRC_HAS_HARDWARE);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}
