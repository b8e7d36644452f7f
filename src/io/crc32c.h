/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as iSCSI and ext4 use it: the
 * checksum of checkpoint files. Software, one table; crc32c("123456789") = 0xE3069283. */
#ifndef DT_IO_CRC32C_H
#define DT_IO_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Continue a checksum over n more bytes (start from crc = 0). */
uint32_t dt_crc32c(uint32_t crc, const void *data, size_t n);
/* The checksum and size of a whole file, read through buf[cap] (pread). */
dt_status dt_crc32c_file(const char *path, void *buf, size_t cap, uint32_t *crc, uint64_t *size);

#endif
