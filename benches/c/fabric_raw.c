/* The raw libfabric baseline for fabric-bench: the same operations the Rust safe layer issues
 * (FI_EP_RDM, AV table, fi_writemsg with FI_COMPLETION | FI_DELIVERY_COMPLETE, FI_INJECT when the
 * payload fits), written directly against the C API. Driven by the Rust binary, which exchanges
 * endpoint names and keys through the bootstrap (the allgather callback) and interleaves runs
 * of this and of the safe layer size by size. */
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*allgather_fn)(void *ctx, const void *mine, size_t len, void *all);

struct craw {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fid_mr *mr;
	void *desc;
	char *buf;
	size_t len;
	int rank, nranks;
	fi_addr_t peer;
	uint64_t remote_base, remote_key;
	int virt_addr;
	uint64_t flags;
	size_t inject;
	struct fi_context2 *ctxs;
	size_t nctx;
	/* Writes posted and completions read, over the endpoint's life (drains in craw_lat). */
	size_t posted, completed;
	/* Where bandwidth runs write from and to, from buf (a shared endpoint: the same bytes as
	 * the Rust side's runs). */
	size_t bw_off;
	/* The endpoint belongs to the Rust layer (craw_attach): never closed here. */
	int borrowed;
	/* buf is CUDA memory the caller owns (registered as FI_HMEM_CUDA, never freed here). */
	int gpu;
	char err[256];
};

static int fail(struct craw *c, const char *what, int rc)
{
	snprintf(c->err, sizeof c->err, "%s: %s", what, fi_strerror(rc < 0 ? -rc : rc));
	return -1;
}

const char *craw_error(struct craw *c) { return c->err; }

/* Registers c->buf (c->len bytes): host memory, or CUDA memory of device `dev` (c->gpu). */
static int register_buf(struct craw *c, int dev)
{
	uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
	struct iovec iov = { .iov_base = c->buf, .iov_len = c->len };
	struct fi_mr_attr attr = { .mr_iov = &iov, .iov_count = 1, .access = access, .requested_key = 1,
				   .iface = c->gpu ? FI_HMEM_CUDA : FI_HMEM_SYSTEM };
	attr.device.cuda = dev;
	return fi_mr_regattr(c->domain, &attr, 0, &c->mr);
}

/* Opens provider `prov` bound to `node` (NULL for shm), registers `len` bytes and connects to
 * the peer (2 ranks). `gpu_buf`: CUDA memory of device `dev` to register instead of a host
 * buffer (FI_HMEM asked; the caller owns it). Returns NULL with the reason in *err on failure. */
struct craw *craw_open(const char *prov, const char *node, int rank, int nranks, size_t len,
		       void *gpu_buf, int dev, allgather_fn allgather, void *actx, char *errbuf,
		       size_t errlen)
{
	struct craw *c = calloc(1, sizeof *c);
	struct fi_info *hints = fi_allocinfo();
	int rc;
	c->rank = rank;
	c->nranks = nranks;
	c->gpu = gpu_buf != NULL;
	hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
	if (c->gpu) hints->caps |= FI_HMEM;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_HMEM | FI_MR_ENDPOINT;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->av_type = FI_AV_TABLE;
	hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	hints->fabric_attr->prov_name = strdup(prov);
	rc = fi_getinfo(FI_VERSION(1, 17), node, NULL, node ? FI_SOURCE : 0, hints, &c->info);
	c->flags = FI_COMPLETION | FI_DELIVERY_COMPLETE;
	if (rc) {
		hints->tx_attr->op_flags = 0;
		c->flags = FI_COMPLETION;
		rc = fi_getinfo(FI_VERSION(1, 17), node, NULL, node ? FI_SOURCE : 0, hints, &c->info);
	}
	fi_freeinfo(hints);
	if (rc) { fail(c, "fi_getinfo", rc); goto out; }
	c->virt_addr = (c->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
	c->inject = c->info->tx_attr->inject_size;
	if ((rc = fi_fabric(c->info->fabric_attr, &c->fabric, NULL))) { fail(c, "fi_fabric", rc); goto out; }
	if ((rc = fi_domain(c->fabric, c->info, &c->domain, NULL))) { fail(c, "fi_domain", rc); goto out; }
	struct fi_cq_attr cqa = { .size = 4096, .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE };
	if ((rc = fi_cq_open(c->domain, &cqa, &c->cq, NULL))) { fail(c, "fi_cq_open", rc); goto out; }
	struct fi_av_attr ava = { .type = FI_AV_TABLE, .count = 8 };
	if ((rc = fi_av_open(c->domain, &ava, &c->av, NULL))) { fail(c, "fi_av_open", rc); goto out; }
	if ((rc = fi_endpoint(c->domain, c->info, &c->ep, NULL))) { fail(c, "fi_endpoint", rc); goto out; }
	if ((rc = fi_ep_bind(c->ep, &c->cq->fid, FI_TRANSMIT | FI_RECV))) { fail(c, "fi_ep_bind", rc); goto out; }
	if ((rc = fi_ep_bind(c->ep, &c->av->fid, 0))) { fail(c, "fi_ep_bind", rc); goto out; }
	if ((rc = fi_enable(c->ep))) { fail(c, "fi_enable", rc); goto out; }
	c->len = len;
	if (c->gpu) {
		c->buf = gpu_buf;
	} else {
		if (posix_memalign((void **)&c->buf, 4096, len)) { fail(c, "posix_memalign", FI_ENOMEM); goto out; }
		memset(c->buf, 0, len);
	}
	if ((rc = register_buf(c, dev))) { fail(c, "fi_mr_regattr", rc); goto out; }
	if (c->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		if ((rc = fi_mr_bind(c->mr, &c->ep->fid, 0)) || (rc = fi_mr_enable(c->mr))) { fail(c, "fi_mr_bind", rc); goto out; }
	}
	c->desc = fi_mr_desc(c->mr);
	c->nctx = 4096;
	c->ctxs = calloc(c->nctx, sizeof *c->ctxs);
	/* Exchange: name (up to 64 bytes), base, key. */
	char mine[80] = {0}, all[160];
	size_t nl = 64;
	if ((rc = fi_getname(&c->ep->fid, mine, &nl))) { fail(c, "fi_getname", rc); goto out; }
	uint64_t base = (uint64_t)(uintptr_t)c->buf, key = fi_mr_key(c->mr);
	memcpy(mine + 64, &base, 8);
	memcpy(mine + 72, &key, 8);
	if (allgather(actx, mine, 80, all)) { snprintf(c->err, sizeof c->err, "allgather failed"); goto out; }
	const char *peer = all + 80 * (1 - rank);
	if (fi_av_insert(c->av, peer, 1, &c->peer, 0, NULL) != 1) { snprintf(c->err, sizeof c->err, "fi_av_insert failed"); goto out; }
	memcpy(&c->remote_base, peer + 64, 8);
	memcpy(&c->remote_key, peer + 72, 8);
	return c;
out:
	snprintf(errbuf, errlen, "%s", c->err);
	return NULL; /* leaks on the error path; the benchmark exits */
}

/* Posts on an endpoint the Rust layer opened and connected (its handles, see
 * OfiTransport::raw_handles): the same connection, CQ and registrations, so that a comparison
 * measures only the code that posts and polls. `off` bytes into both registrations, this side's
 * latency flag lives apart from the Rust side's; bandwidth runs use the bytes from 2 * `off`, as
 * the Rust side's do. */
struct craw *craw_attach(struct fid_ep *ep, struct fid_cq *cq, fi_addr_t peer, char *local,
			 size_t len, void *desc, uint64_t remote_addr, uint64_t remote_key,
			 size_t inject, uint64_t flags, int rank, size_t off)
{
	struct craw *c = calloc(1, sizeof *c);
	c->borrowed = 1;
	c->ep = ep;
	c->cq = cq;
	c->peer = peer;
	c->buf = local + off;
	c->len = len - off;
	c->bw_off = off;
	c->desc = desc;
	c->virt_addr = 1; /* remote_addr is 0 when the provider wants offsets */
	c->remote_base = remote_addr + off;
	c->remote_key = remote_key;
	c->inject = inject;
	c->flags = flags;
	c->rank = rank;
	c->nranks = 2;
	c->nctx = 4096;
	c->ctxs = calloc(c->nctx, sizeof *c->ctxs);
	return c;
}

/* Reads completions; returns how many, or -1 on an error completion. */
int craw_progress(struct craw *c)
{
	struct fi_cq_data_entry e[64];
	ssize_t n = fi_cq_read(c->cq, e, 64);
	if (n > 0) {
		c->completed += (size_t)n;
		return (int)n;
	}
	if (n == -FI_EAGAIN) return 0;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = {0};
		fi_cq_readerr(c->cq, &err, 0);
		fail(c, "completion", err.err);
		return -1;
	}
	fail(c, "fi_cq_read", (int)n);
	return -1;
}

static int post_write_at(struct craw *c, size_t loff, size_t roff, size_t len, size_t slot)
{
	void *desc = c->desc;
	struct iovec iov = { .iov_base = c->buf + loff, .iov_len = len };
	struct fi_rma_iov rma = { .addr = (c->virt_addr ? c->remote_base : 0) + roff, .len = len, .key = c->remote_key };
	struct fi_msg_rma msg = { .msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = c->peer,
				  .rma_iov = &rma, .rma_iov_count = 1, .context = &c->ctxs[slot % c->nctx] };
	uint64_t flags = c->flags | (len <= c->inject ? FI_INJECT : 0);
	for (;;) {
		ssize_t rc = fi_writemsg(c->ep, &msg, flags);
		if (rc == 0) {
			c->posted++;
			return 0;
		}
		if (rc != -FI_EAGAIN) return fail(c, "fi_writemsg", (int)rc);
		if (craw_progress(c) < 0) return -1;
	}
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Rank 0: `count` writes of `size` bytes, at most `window` outstanding; seconds, or < 0. */
double craw_bw(struct craw *c, size_t size, size_t count, size_t window)
{
	size_t posted = 0, done = 0;
	double t0 = now_s();
	while (done < count) {
		while (posted < count && posted - done < window) {
			if (post_write_at(c, c->bw_off, c->bw_off, size, posted)) return -1;
			posted++;
		}
		int n = craw_progress(c);
		if (n < 0) return -1;
		done += (size_t)n;
	}
	return now_s() - t0;
}

/* Rank 0: `iters` 8-byte writes one at a time, each waited for (its completion: with delivery
 * complete, the data placed at the peer); the mean time of one (s), or < 0. Works on GPU
 * buffers, which the CPU cannot poll; the peer progresses its endpoint meanwhile. */
double craw_wlat(struct craw *c, size_t iters)
{
	double t0 = 0;
	for (size_t i = 0; i < iters + 10; i++) {
		if (i == 10) t0 = now_s();
		if (post_write_at(c, 64, 0, 8, i)) return -1;
		while (c->completed < c->posted) if (craw_progress(c) < 0) return -1;
	}
	return (now_s() - t0) / (double)iters;
}

/* Ping-pong of 8-byte writes into the peer's first word; returns the half round trip (s). */
double craw_lat(struct craw *c, size_t iters)
{
	volatile uint64_t *flag = (volatile uint64_t *)c->buf;
	uint64_t *out = (uint64_t *)(c->buf + 64);
	double t0 = 0;
	for (size_t i = 1; i <= iters + 10; i++) {
		if (i == 11) t0 = now_s();
		if (c->rank == 0) {
			*out = i;
			/* the value travels from buf+64 into the peer's buf+0 */
			if (post_write_at(c, 64, 0, 8, i)) return -1;
			while (*flag != i) if (craw_progress(c) < 0) return -1;
		} else {
			while (*flag != i) if (craw_progress(c) < 0) return -1;
			*out = i;
			if (post_write_at(c, 64, 0, 8, i)) return -1;
		}
	}
	double t = (now_s() - t0) / (2.0 * iters);
	/* Leave no completion behind for whoever reads the CQ next. */
	while (c->completed < c->posted) if (craw_progress(c) < 0) return -1;
	return t;
}

void craw_close(struct craw *c)
{
	if (c->borrowed) {
		free(c->ctxs);
		free(c);
		return;
	}
	fi_close(&c->ep->fid);
	fi_close(&c->mr->fid);
	fi_close(&c->av->fid);
	fi_close(&c->cq->fid);
	fi_close(&c->domain->fid);
	fi_close(&c->fabric->fid);
	fi_freeinfo(c->info);
	if (!c->gpu) free(c->buf);
	free(c->ctxs);
	free(c);
}
