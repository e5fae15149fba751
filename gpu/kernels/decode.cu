/*
 * decode.cu: the CUDA kernels of the gpu package's cuda backend. They
 * decode raw Pi-mega frames (format version 1, spec/frames.md) into images
 * and checksum payloads and images with CRC-32C.
 *
 * The same source is compiled two ways:
 *   - for the GPU, to PTX, by clang with device.h (gen.sh);
 *   - for the host, as C, with host.h (package gpu/internal/hostgrid),
 *     where a runner calls each kernel once per thread of the grid.
 * So it is written in the common subset of C and C++, and no thread reads
 * what another thread of the same launch writes: no shared memory, no
 * barriers. Work that depends on other threads' results is a later launch.
 *
 * A batch is an array of struct h5_frame in device memory, one per frame;
 * blockIdx.y picks the frame, and the threads of the x dimension stride
 * over the frame's work. Per batch, on one stream:
 *   1. h5_decode:   image pixels from the payload;
 *   2. h5_crc_sub:  CRC-32C of every H5_CRC_SUB-byte sub-piece of the
 *                   payload and of the image;
 *   3. h5_crc_fold: the CRC of every run of H5_CRC_RUN sub-pieces (a
 *                   piece), folded with the CRC-32C combine operator;
 *   4. h5_shuffle:  for the frames that ask for it, the image
 *                   bit-transposed as the bitshuffle filter transposes a
 *                   chunk, into a second buffer.
 * The host folds the pieces of each frame into its two CRCs.
 */

#define H5_CRC_SUB 1024 /* bytes a thread checksums in h5_crc_sub */
#define H5_CRC_RUN 64   /* sub-pieces a thread folds in h5_crc_fold */
#define H5_CRC_POLY 0x82F63B78u /* CRC-32C, reflected */

/* Encodings and codings of format version 1. */
#define H5_BITPLANE 1
#define H5_PACKED12 2
#define H5_PACKED24 3
#define H5_U16LE 4
#define H5_U32LE 5
#define H5_LFSR 1

/*
 * struct h5_frame describes one frame of a batch. Addresses are device
 * addresses. The host writes it byte by byte (package gpu), so its layout
 * is fixed: 112 bytes, no padding the compiler chooses.
 */
struct h5_frame {
	unsigned long long payload; /*  0: payload_size bytes */
	unsigned long long image;   /*  8: image_size bytes */
	unsigned long long rot;     /* 16: one byte per chip, nonzero = 180 degrees; 0 = none */
	unsigned long long subs;    /* 24: raw_subs + img_subs sub-piece CRCs */
	unsigned long long pieces;  /* 32: raw_pieces + img_pieces piece CRCs */
	unsigned int payload_size;  /* 40 */
	unsigned int image_size;    /* 44 */
	unsigned int units;         /* 48: h5_decode work items: 8-pixel groups (bitplane) or pixels */
	unsigned int raw_subs;      /* 52 */
	unsigned int img_subs;      /* 56 */
	unsigned int raw_pieces;    /* 60 */
	unsigned int img_pieces;    /* 64 */
	unsigned int op_sub;        /* 68: x^(8 H5_CRC_SUB) mod P, reflected */
	unsigned int op_raw_last;   /* 72: x^(8 n) mod P, n = bytes of the last payload sub-piece */
	unsigned int op_img_last;   /* 76: likewise for the image */
	unsigned short chips_x;     /* 80 */
	unsigned short chips_y;     /* 82 */
	unsigned short chip_w;      /* 84 */
	unsigned short chip_h;      /* 86 */
	unsigned char encoding;     /* 88 */
	unsigned char depth;        /* 89 */
	unsigned char coding;       /* 90 */
	unsigned char pix;          /* 91: image bytes per pixel, 2 or 4 */
	unsigned int block;         /* 92: bitshuffle block, pixels; 0 = no transpose */
	unsigned long long shuffled; /* 96: image_size bytes, the transposed image */
	unsigned int lut;           /* 104: where the LFSR tables are read: H5_LUT_CONSTANT or H5_LUT_GLOBAL */
	unsigned int reserved;      /* 108 */
};

/*
 * Tables the host uploads when it loads the module. The LFSR tables are
 * there twice: constant memory serves a warp at once only where its
 * threads read one address, and LFSR codes of neighbouring pixels differ,
 * so the copy in global memory (through the read-only cache) may serve
 * them faster. A frame's lut says which copy h5_decode reads; which is
 * faster is for a GPU to measure (BenchmarkKernels).
 */
#define H5_LUT_CONSTANT 0
#define H5_LUT_GLOBAL 1
__constant__ unsigned short h5_lfsr12[4096]; /* 12-bit LFSR code -> count */
__constant__ unsigned short h5_lfsr6[64];    /* 6-bit LFSR code -> count */
__device__ unsigned short h5_lfsr12_global[4096];
__device__ unsigned short h5_lfsr6_global[64];
__device__ unsigned int h5_crc_table[8][256]; /* CRC-32C slicing-by-8 */

/*
 * H5_COUNT defines a function returning the count that counter code c of
 * an LFSR-coded depth stands for, from the tables t12 and t6: one function
 * per copy of the tables, so that each reads its own memory space.
 */
#define H5_COUNT(name, t12, t6) \
	H5_DEVICE unsigned int name(unsigned int c, unsigned int depth) \
	{ \
		switch (depth) { \
		case 24: \
			return (unsigned int)t12[c >> 12] << 12 | t12[c & 0xFFF]; \
		case 12: \
			return t12[c & 0xFFF]; \
		case 6: \
			return t6[c & 0x3F]; \
		} \
		return c; \
	}
H5_COUNT(count_constant, h5_lfsr12, h5_lfsr6)
H5_COUNT(count_global, h5_lfsr12_global, h5_lfsr6_global)

/* count returns the count that counter code c stands for. */
H5_DEVICE unsigned int count(const struct h5_frame *f, unsigned int c)
{
	if (f->coding != H5_LFSR)
		return c;
	if (f->lut == H5_LUT_GLOBAL)
		return count_global(c, f->depth);
	return count_constant(c, f->depth);
}

/* put stores pixel i of the image, little-endian (both GPU and host are). */
H5_DEVICE void put(unsigned long long image, int pix, unsigned long long i, unsigned int v)
{
	if (pix == 2)
		((unsigned short *)image)[i] = (unsigned short)v;
	else
		((unsigned int *)image)[i] = v;
}

/* place returns the image index of pixel (r, c) of chip k. */
H5_DEVICE unsigned long long place(const struct h5_frame *f, unsigned int k, unsigned int r,
				   unsigned int c, int rotated)
{
	unsigned int cy = k / f->chips_x, cx = k % f->chips_x;
	if (rotated) {
		r = f->chip_h - 1u - r;
		c = f->chip_w - 1u - c;
	}
	unsigned long long width = (unsigned long long)f->chips_x * f->chip_w;
	return ((unsigned long long)cy * f->chip_h + r) * width + (unsigned long long)cx * f->chip_w + c;
}

/*
 * bitplane decodes unit u of a bitplane frame: 8 neighbouring pixels of a
 * chip row, one byte of every plane. Threads of a warp read neighbouring
 * bytes of each plane.
 */
H5_DEVICE void bitplane(const struct h5_frame *f, unsigned int u)
{
	unsigned int groups = f->chip_w / 8u; /* 8-pixel groups per chip row */
	unsigned int depth = f->depth;
	unsigned int perChip = groups * f->chip_h;
	unsigned int k = u / perChip, rem = u % perChip;
	unsigned int r = rem / groups, g = rem % groups;
	unsigned long long chipBytes = (unsigned long long)depth * groups * f->chip_h;
	const unsigned char *row = (const unsigned char *)f->payload + k * chipBytes +
				   (unsigned long long)r * depth * groups + g;
	unsigned int code[8];
	H5_UNROLL
	for (int i = 0; i < 8; i++)
		code[i] = 0;
	for (unsigned int p = 0; p < depth; p++) { /* most significant plane first */
		unsigned int b = row[p * groups];
		H5_UNROLL
		for (int i = 0; i < 8; i++)
			code[i] = code[i] << 1 | (b >> (7 - i) & 1u);
	}
	int rotated = f->rot != 0 && ((const unsigned char *)f->rot)[k] != 0;
	H5_UNROLL
	for (int i = 0; i < 8; i++) {
		unsigned long long at = place(f, k, r, 8u * g + (unsigned int)i, rotated);
		put(f->image, f->pix, at, count(f, code[i]));
	}
}

/* pixel decodes unit u of a frame of any other encoding: one pixel. */
H5_DEVICE void pixel(const struct h5_frame *f, unsigned int u)
{
	unsigned int chipPixels = (unsigned int)f->chip_w * f->chip_h;
	unsigned int k = u / chipPixels, n = u % chipPixels;
	const unsigned char *chip = (const unsigned char *)f->payload;
	const unsigned char *b;
	unsigned int v;
	switch (f->encoding) {
	case H5_PACKED12:
		b = chip + (unsigned long long)k * (chipPixels / 2u * 3u) + 3ull * (n / 2u);
		if (n % 2u == 0)
			v = b[0] | (unsigned int)(b[1] & 0x0F) << 8;
		else
			v = (unsigned int)(b[1] >> 4) | (unsigned int)b[2] << 4;
		break;
	case H5_PACKED24:
		b = chip + 3ull * ((unsigned long long)k * chipPixels + n);
		v = b[0] | (unsigned int)b[1] << 8 | (unsigned int)b[2] << 16;
		break;
	case H5_U16LE:
		b = chip + 2ull * ((unsigned long long)k * chipPixels + n);
		v = b[0] | (unsigned int)b[1] << 8;
		break;
	default: /* H5_U32LE */
		b = chip + 4ull * ((unsigned long long)k * chipPixels + n);
		v = b[0] | (unsigned int)b[1] << 8 | (unsigned int)b[2] << 16 | (unsigned int)b[3] << 24;
		break;
	}
	int rotated = f->rot != 0 && ((const unsigned char *)f->rot)[k] != 0;
	put(f->image, f->pix, place(f, k, n / f->chip_w, n % f->chip_w, rotated), v);
}

/* h5_decode decodes every frame of the batch into its image. */
H5_KERNEL h5_decode(const struct h5_frame *frames, unsigned int n)
{
	if (blockIdx.y >= n)
		return;
	const struct h5_frame *f = &frames[blockIdx.y];
	unsigned int stride = blockDim.x * gridDim.x;
	unsigned int units = f->units;
	if (f->encoding == H5_BITPLANE) {
		for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < units; u += stride)
			bitplane(f, u);
		return;
	}
	for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < units; u += stride)
		pixel(f, u);
}

/*
 * crc32c returns the CRC-32C of n bytes at p, slicing by 8 bytes. p is
 * 8-byte aligned: pieces start at multiples of H5_CRC_SUB from buffers the
 * host aligns.
 */
H5_DEVICE unsigned int crc32c(const unsigned char *p, unsigned int n)
{
	unsigned int crc = 0xFFFFFFFFu;
	const unsigned int *w = (const unsigned int *)p;
	for (; n >= 8; n -= 8, w += 2) {
		unsigned int lo = w[0] ^ crc, hi = w[1];
		crc = h5_crc_table[7][lo & 0xFF] ^ h5_crc_table[6][lo >> 8 & 0xFF] ^
		      h5_crc_table[5][lo >> 16 & 0xFF] ^ h5_crc_table[4][lo >> 24] ^
		      h5_crc_table[3][hi & 0xFF] ^ h5_crc_table[2][hi >> 8 & 0xFF] ^
		      h5_crc_table[1][hi >> 16 & 0xFF] ^ h5_crc_table[0][hi >> 24];
	}
	for (p = (const unsigned char *)w; n > 0; n--, p++)
		crc = h5_crc_table[0][(crc ^ *p) & 0xFF] ^ crc >> 8;
	return ~crc;
}

/* h5_crc_sub checksums every sub-piece of every payload and image. */
H5_KERNEL h5_crc_sub(const struct h5_frame *frames, unsigned int n)
{
	if (blockIdx.y >= n)
		return;
	const struct h5_frame *f = &frames[blockIdx.y];
	unsigned int total = f->raw_subs + f->img_subs;
	unsigned int stride = blockDim.x * gridDim.x;
	for (unsigned int s = blockIdx.x * blockDim.x + threadIdx.x; s < total; s += stride) {
		unsigned long long base = f->payload;
		unsigned int size = f->payload_size, i = s;
		if (s >= f->raw_subs) {
			base = f->image;
			size = f->image_size;
			i = s - f->raw_subs;
		}
		unsigned int off = i * H5_CRC_SUB;
		unsigned int len = size - off < H5_CRC_SUB ? size - off : H5_CRC_SUB;
		((unsigned int *)f->subs)[s] = crc32c((const unsigned char *)base + off, len);
	}
}

/* mulmod returns a*b mod P for polynomials in the CRC's reflected order. */
H5_DEVICE unsigned int mulmod(unsigned int a, unsigned int b)
{
	unsigned int p = 0;
	for (int i = 31; i >= 0; i--) {
		p ^= b & (0u - (a >> i & 1u));
		b = b >> 1 ^ (H5_CRC_POLY & (0u - (b & 1u)));
	}
	return p;
}

/*
 * h5_crc_fold folds every run of H5_CRC_RUN sub-piece CRCs into the CRC of
 * the run: c = c * x^(8 len) ^ crc(next sub-piece), from c = 0.
 */
H5_KERNEL h5_crc_fold(const struct h5_frame *frames, unsigned int n)
{
	if (blockIdx.y >= n)
		return;
	const struct h5_frame *f = &frames[blockIdx.y];
	unsigned int total = f->raw_pieces + f->img_pieces;
	unsigned int stride = blockDim.x * gridDim.x;
	const unsigned int *subs = (const unsigned int *)f->subs;
	for (unsigned int j = blockIdx.x * blockDim.x + threadIdx.x; j < total; j += stride) {
		unsigned int first = j * H5_CRC_RUN, end = f->raw_subs, opLast = f->op_raw_last;
		if (j >= f->raw_pieces) {
			first = f->raw_subs + (j - f->raw_pieces) * H5_CRC_RUN;
			end = f->raw_subs + f->img_subs;
			opLast = f->op_img_last;
		}
		unsigned int last = end - 1; /* the stream's last sub-piece may be short */
		if (end > first + H5_CRC_RUN)
			end = first + H5_CRC_RUN;
		unsigned int c = 0;
		for (unsigned int s = first; s < end; s++)
			c = mulmod(s == last ? opLast : f->op_sub, c) ^ subs[s];
		((unsigned int *)f->pieces)[j] = c;
	}
}

/*
 * transpose8 transposes the 8x8 bit matrix x whose row i is byte i (bit j
 * of a byte is column j): bit 8i+j moves to bit 8j+i.
 */
H5_DEVICE unsigned long long transpose8(unsigned long long x)
{
	unsigned long long t;
	t = (x ^ x >> 7) & 0x00AA00AA00AA00AAull;
	x ^= t ^ t << 7;
	t = (x ^ x >> 14) & 0x0000CCCC0000CCCCull;
	x ^= t ^ t << 14;
	t = (x ^ x >> 28) & 0x00000000F0F0F0F0ull;
	x ^= t ^ t << 28;
	return x;
}

/*
 * h5_shuffle bit-transposes the image of every frame with a block into its
 * shuffled buffer, in the layout of the bitshuffle filter (filter 32008)
 * before compression: the image's n pixels of pix bytes go as blocks of
 * `block` pixels, then one partial block of the largest multiple of 8
 * pixels left, then the last n mod 8 pixels unchanged. Within a block of B
 * pixels, bit r of pixel i (r counted from the least significant bit of
 * the first byte) moves to bit r*B+i.
 *
 * One thread per group of 8 pixels: for each byte position of a pixel it
 * gathers that byte of the 8 pixels, transposes the 8x8 bits and writes
 * one byte into each of 8 bit-plane rows of the block. Neighbouring
 * threads read neighbouring groups and write neighbouring bytes of a row.
 */
H5_KERNEL h5_shuffle(const struct h5_frame *frames, unsigned int n)
{
	if (blockIdx.y >= n)
		return;
	const struct h5_frame *f = &frames[blockIdx.y];
	unsigned int bs = f->block;
	if (bs == 0)
		return;
	unsigned int pix = f->pix, pixels = f->image_size / pix;
	unsigned int full = pixels / bs, left = pixels % bs, partial = left - left % 8u;
	unsigned int groups = (pixels + 7u) / 8u;
	const unsigned char *in = (const unsigned char *)f->image;
	unsigned char *out = (unsigned char *)f->shuffled;
	unsigned int stride = blockDim.x * gridDim.x;
	for (unsigned int g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += stride) {
		unsigned long long e = 8ull * g; /* first pixel of the group */
		if (e + 8u > pixels) { /* the last pixels, fewer than 8: as they are */
			for (unsigned long long i = e * pix; i < (unsigned long long)pixels * pix; i++)
				out[i] = in[i];
			continue;
		}
		unsigned long long base = (unsigned long long)full * bs; /* first pixel of the block */
		unsigned int size = partial;                              /* pixels in the block */
		if (e < base) {
			base = e / bs * bs;
			size = bs;
		}
		unsigned long long row = size / 8u; /* bytes of a bit-plane row */
		unsigned char *dst = out + base * pix + (e - base) / 8u;
		const unsigned char *src = in + e * pix;
		for (unsigned int b = 0; b < pix; b++) {
			unsigned long long x = 0;
			H5_UNROLL
			for (int i = 0; i < 8; i++)
				x |= (unsigned long long)src[i * pix + b] << (8 * i);
			x = transpose8(x);
			H5_UNROLL
			for (int r = 0; r < 8; r++)
				dst[(8ull * b + r) * row] = (unsigned char)(x >> (8 * r));
		}
	}
}
