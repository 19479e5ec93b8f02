// qmp-thirdparty: one migration driven at both ends by qemu-qmp, a QMP
// client from the npm registry (github.com/siboulet/node-qemu-qmp) that
// no one on this project wrote: it connects, reads the greeting, sends
// qmp_capabilities itself and matches replies to commands in order.
//
//   node qmp-thirdparty.js DSOCK SSOCK URI
//
// The destination (vmm run --incoming defer) gets migrate-incoming URI;
// the source sets postcopy-ram and events, migrates, leaves precopy with
// migrate-start-postcopy and is polled to completed; the destination's
// query-status must then say running.  Prints "ok: ..." per check; exits
// 0 when all held, 1 with the reason.
'use strict';
const QMP = require('qemu-qmp');

const [dsock, ssock, uri] = process.argv.slice(2);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function check(cond, what) {
	if (!cond)
		throw new Error(what);
	console.log(`ok: ${what}`);
}

// The library's callback API as promises; its own connect() negotiates.
// A command pending when the peer closes fails (the library would drop it).
function connect(path) {
	return new Promise((resolve, reject) => {
		const q = new QMP();
		q.waiting = new Set();
		q.on('close', () => {
			for (const fail of q.waiting)
				fail(new Error(`${path}: connection closed`));
		});
		q.connect(path, (err) => {
			if (err)
				return reject(err);
			// After connect(): the library drops every 'error' listener there.
			// A write to a peer that has gone (EPIPE) fails what waits.
			q.on('error', (e) => {
				for (const fail of q.waiting)
					fail(new Error(`${path}: ${e.message}`));
			});
			resolve(q);
		});
	});
}

function run(q, cmd, args) {
	return new Promise((resolve, reject) => {
		if (q.destroyed)
			return reject(new Error('connection closed'));
		q.waiting.add(reject);
		q.execute(cmd, args || null, (err, ret) => {
			q.waiting.delete(reject);
			return err ? reject(err) : resolve(ret);
		});
	});
}

// Poll query-migrate until its status is one of want (a hang guard, not a speed limit).
async function until(q, want, limitMs) {
	let st = {};
	for (const end = Date.now() + limitMs; Date.now() < end; await sleep(200)) {
		st = await run(q, 'query-migrate');
		if (want.includes(st.status))
			return st;
	}
	throw new Error(`status never became one of ${want}: ${JSON.stringify(st)}`);
}

async function main() {
	const d = await connect(dsock);
	check(d.version && d.version.qemu, `destination greeting read by qemu-qmp: ${JSON.stringify(d.version)}`);
	let st = await run(d, 'query-status');
	check(st.status === 'inmigrate', `destination query-status: ${st.status}`);
	await run(d, 'migrate-incoming', { uri });

	const s = await connect(ssock);
	let events = 0;
	s.on('migration', () => events++);
	await run(s, 'migrate-set-capabilities', {
		capabilities: [{ capability: 'postcopy-ram', state: true },
			       { capability: 'events', state: true }],
	});
	await run(s, 'migrate', { uri });
	st = await until(s, ['active'], 240000);
	check(st.ram && st.ram.total > 0, `source in precopy: ${st.ram.transferred} of ${st.ram.total} bytes`);
	await run(s, 'migrate-start-postcopy');
	let done;
	try {
		st = await until(s, ['completed'], 240000);
		done = 'completed';
	} catch (e) {
		await sleep(500); // the close that follows an EPIPE
		if (!s.destroyed)
			throw e;
		// A source VMM that exits once the VM runs at the destination; its
		// exit status and the checksum are checked by the caller.
		done = `the source VMM ended the connection (${e.message})`;
	}
	check(done, `source: ${done}`);
	check(events > 0, `source: ${events} MIGRATION events seen by the library`);
	for (const end = Date.now() + 120000; Date.now() < end; await sleep(200)) {
		st = await run(d, 'query-status');
		if (st.status === 'running')
			break;
	}
	check(st.status === 'running' && st.running, 'destination: the VM runs there');
	// A source that waits in postmigrate is ended as QEMU's is: quit.
	if (!s.destroyed)
		await run(s, 'quit').catch(() => {});
	d.end();
	s.destroy();
}

main().then(() => process.exit(0), (e) => {
	console.error(`FAIL: ${e.message}`);
	process.exit(1);
});
