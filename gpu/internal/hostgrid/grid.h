#include <stddef.h>

#define HOSTGRID_LAYOUT_LEN 30

int hostgrid_launch(int kernel, unsigned int gx, unsigned int gy, unsigned int bx,
		    unsigned long long frames, unsigned int n);
int hostgrid_upload(int global, const void *src, size_t n);
void hostgrid_layout(int *out);
