// grid.c compiles the kernels of gpu/kernels/decode.cu as host C (through
// the links decode_cu.h and host_shim.h, so that the build cache sees
// changes to them) and runs a launch's grid as loops.

#include <stddef.h>
#include <string.h>

#include "host_shim.h"
#include "decode_cu.h"
#include "grid.h"

_Thread_local h5_dim3 threadIdx, blockIdx, blockDim, gridDim;

typedef void (*kernel_fn)(const struct h5_frame *, unsigned int);

static kernel_fn kernels[] = {h5_decode, h5_crc_sub, h5_crc_fold, h5_shuffle};

int hostgrid_launch(int kernel, unsigned int gx, unsigned int gy, unsigned int bx,
		    unsigned long long frames, unsigned int n)
{
	if (kernel < 0 || kernel >= (int)(sizeof kernels / sizeof kernels[0]))
		return -1;
	kernel_fn fn = kernels[kernel];
	gridDim = (h5_dim3){gx, gy, 1};
	blockDim = (h5_dim3){bx, 1, 1};
	for (unsigned int y = 0; y < gy; y++)
		for (unsigned int x = 0; x < gx; x++) {
			blockIdx = (h5_dim3){x, y, 0};
			for (unsigned int t = 0; t < bx; t++) {
				threadIdx = (h5_dim3){t, 0, 0};
				fn((const struct h5_frame *)frames, n);
			}
		}
	return 0;
}

static void *globals[] = {h5_lfsr12, h5_lfsr6, h5_crc_table, h5_lfsr12_global, h5_lfsr6_global};
static const size_t global_sizes[] = {sizeof h5_lfsr12, sizeof h5_lfsr6, sizeof h5_crc_table,
				      sizeof h5_lfsr12_global, sizeof h5_lfsr6_global};

int hostgrid_upload(int global, const void *src, size_t n)
{
	if (global < 0 || global >= (int)(sizeof globals / sizeof globals[0]) || n != global_sizes[global])
		return -1;
	memcpy(globals[global], src, n);
	return 0;
}

void hostgrid_layout(int *out)
{
	int i = 0;
	out[i++] = (int)sizeof(struct h5_frame);
	out[i++] = (int)offsetof(struct h5_frame, payload);
	out[i++] = (int)offsetof(struct h5_frame, image);
	out[i++] = (int)offsetof(struct h5_frame, rot);
	out[i++] = (int)offsetof(struct h5_frame, subs);
	out[i++] = (int)offsetof(struct h5_frame, pieces);
	out[i++] = (int)offsetof(struct h5_frame, payload_size);
	out[i++] = (int)offsetof(struct h5_frame, image_size);
	out[i++] = (int)offsetof(struct h5_frame, units);
	out[i++] = (int)offsetof(struct h5_frame, raw_subs);
	out[i++] = (int)offsetof(struct h5_frame, img_subs);
	out[i++] = (int)offsetof(struct h5_frame, raw_pieces);
	out[i++] = (int)offsetof(struct h5_frame, img_pieces);
	out[i++] = (int)offsetof(struct h5_frame, op_sub);
	out[i++] = (int)offsetof(struct h5_frame, op_raw_last);
	out[i++] = (int)offsetof(struct h5_frame, op_img_last);
	out[i++] = (int)offsetof(struct h5_frame, chips_x);
	out[i++] = (int)offsetof(struct h5_frame, chips_y);
	out[i++] = (int)offsetof(struct h5_frame, chip_w);
	out[i++] = (int)offsetof(struct h5_frame, chip_h);
	out[i++] = (int)offsetof(struct h5_frame, encoding);
	out[i++] = (int)offsetof(struct h5_frame, depth);
	out[i++] = (int)offsetof(struct h5_frame, coding);
	out[i++] = (int)offsetof(struct h5_frame, pix);
	out[i++] = (int)offsetof(struct h5_frame, block);
	out[i++] = (int)offsetof(struct h5_frame, shuffled);
	out[i++] = (int)offsetof(struct h5_frame, lut);
	out[i++] = (int)offsetof(struct h5_frame, reserved);
	out[i++] = H5_CRC_SUB;
	out[i++] = H5_CRC_RUN;
}
