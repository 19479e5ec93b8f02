/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Session authentication (wire.h, struct mig_auth): random secrets and
 * nonces, and the proof a reconnecting source gives.  OpenSSL's libcrypto
 * does the cryptography; nothing here is hand-written crypto.
 */
#ifndef MIGRATE_AUTH_H
#define MIGRATE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "migrate/wire.h"

/* n cryptographically random bytes.  0, or -EIO with a message. */
int mig_random_bytes(void *buf, size_t n, char *err, size_t errlen);

/*
 * The proof for a challenge: HMAC-SHA256(secret, "PCMG-AUTH" || nonce ||
 * session_id (8 bytes LE) || channel (2 bytes LE)).  Binding the session and
 * the channel keeps a proof from being replayed elsewhere.
 */
void mig_auth_proof(const uint8_t secret[MIG_SECRET_LEN], const uint8_t nonce[MIG_SECRET_LEN],
		    uint64_t session_id, uint16_t channel, uint8_t out[MIG_SECRET_LEN]);

/* Free this thread's OpenSSL state (call before a thread that drew random bytes ends). */
void mig_auth_thread_cleanup(void);

/* 1 when a and b (MIG_SECRET_LEN bytes) are equal; constant time. */
int mig_auth_equal(const uint8_t *a, const uint8_t *b);

#endif /* MIGRATE_AUTH_H */
