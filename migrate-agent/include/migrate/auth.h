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
 * The proof for a challenge, by `prover` (MIG_ROLE_SOURCE or MIG_ROLE_DEST):
 * HMAC-SHA256(secret, LABEL || nonce || session_id (8 bytes LE) || channel
 * (2 bytes LE) || binding), LABEL "PCMG-AUTH-SRC" or "PCMG-AUTH-DST".
 * Binding the session and the channel keeps a proof from being replayed on
 * another; binding the connection's TLS session (binding: its exporter
 * value, mig_conn_binding(); zeroes on plain TCP) keeps a relay that
 * forwards a challenge from one TLS session to another from using the
 * answer; the label keeps one side's proof from being reflected as the
 * other's.  0, or -EIO with out wiped when the HMAC failed: the caller
 * refuses, never compares.
 */
int mig_auth_proof(const uint8_t secret[MIG_SECRET_LEN], int prover,
		   const uint8_t nonce[MIG_SECRET_LEN], uint64_t session_id, uint16_t channel,
		   const uint8_t binding[MIG_SECRET_LEN], uint8_t out[MIG_SECRET_LEN]);

/*
 * Is proof the right answer by prover to nonce?  1 yes, 0 no (and 0 when
 * the HMAC itself failed: fails closed).  Constant time.
 */
int mig_auth_check(const uint8_t secret[MIG_SECRET_LEN], int prover,
		   const uint8_t nonce[MIG_SECRET_LEN], uint64_t session_id, uint16_t channel,
		   const uint8_t binding[MIG_SECRET_LEN], const uint8_t proof[MIG_SECRET_LEN]);

/*
 * The channel a proof binds (wire.h, AUTH): HELLO.channel and, for a bulk
 * channel, its bulk_index, so that a proof made on one bulk channel cannot
 * be replayed on another of the same attempt.  Bulk channel 0's value is
 * version 3's MIG_CHAN_BULK.
 */
static inline uint16_t mig_auth_channel(uint16_t channel, uint16_t bulk_index)
{
	return (uint16_t)(channel | bulk_index << 8);
}

/* Wipe a secret from memory (OPENSSL_cleanse: not optimised away). */
void mig_auth_wipe(void *p, size_t n);

/* Free this thread's OpenSSL state (call before a thread that drew random bytes ends). */
void mig_auth_thread_cleanup(void);

#endif /* MIGRATE_AUTH_H */
