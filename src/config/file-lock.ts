/**
 * The read-change-write of a file that more than one process writes (the running store and the
 * CLI: the services file, the authorization server's file, the keys file) under one lock, so that
 * a write never lands between another's read and write and undoes it. The lock is a directory
 * beside the file (`<file>.lock`: `mkdir` is atomic), whose time its holder refreshes every second:
 * one left by a killed holder is taken over once it is stale, and a writer waits for it within a
 * bound. Written here rather than taken from a library: the one that does this (proper-lockfile)
 * installs handlers for a dozen signals in every process that loads it, which changed how the
 * store ends on some of them.
 */
import { mkdir, rename, rmdir, stat, utimes } from "node:fs/promises"
import { randomBytes } from "node:crypto"
import { log } from "../logging/log.js"

/** A lock not refreshed for this long is a dead holder's, and taken over (ms). Short: a killed store's lock delays the next writer this long. */
const STALE_MS = 2_000
/** How often a holder refreshes its lock's time (ms). */
const REFRESH_MS = 1_000
/** How long a writer waits for the lock before it gives up with `FileLockTimeout` (ms): past a killed holder's lock. */
const WAIT_MS = 8_000
/** The pause between two tries (ms). */
const RETRY_MS = 25

/** The files whose lock this process held and lost (not refreshed in time: a stalled event loop), until their change ends. */
const lost = new Set<string>()

/**
 * Throws when this process holds `path`'s lock no more while it changes the file: another process
 * may have taken it over since and written, and this write would undo that. `writeAtomically`
 * asks before it puts a file in place.
 */
export const refuseIfLockLost = (path: string): void => {
  if (lost.has(path)) throw new Error(`${path} was not written: its lock was lost while it was changed (this process stalled); try again`)
}

/** The lock of a file was held by another process for longer than a writer waits. */
export class FileLockTimeout extends Error {
  /** As a system error's: the CLI prints an error with a code as one line. */
  readonly code = "ELOCKED"
  constructor(readonly path: string) {
    super(`${path} is being changed by another process (its lock ${path}.lock was held for over ${WAIT_MS / 1000} s); try again`)
  }
}

const errnoOf = (e: unknown): string | undefined => (e as { code?: string }).code

/**
 * Runs `change` (a read, a change, a write of `path`) while holding the file's lock; rejects with
 * `FileLockTimeout` when another process holds it for longer than `WAIT_MS`.
 */
export const withFileLock = async <A>(path: string, change: () => Promise<A>): Promise<A> => {
  const lockDir = `${path}.lock`
  let stamp = await acquire(path, lockDir)
  // Refreshed while held; a lock whose time is not the one set here was taken over by another process.
  const refresh = setInterval(() => {
    void (async () => {
      const seen = await stat(lockDir).then((s) => s.mtimeMs, () => undefined)
      if (seen === undefined || Math.abs(seen - stamp) > 1) {
        if (!lost.has(path)) log.warn(`the lock of ${path} was lost while held (another process took it over): the change under way is not written`, { event: "file_lock_lost", file: path })
        lost.add(path)
        clearInterval(refresh)
        return
      }
      stamp = Date.now()
      await utimes(lockDir, stamp / 1000, stamp / 1000).catch(() => undefined)
      stamp = await stat(lockDir).then((s) => s.mtimeMs, () => stamp)
    })()
  }, REFRESH_MS)
  refresh.unref()
  try {
    return await change()
  } finally {
    clearInterval(refresh)
    if (lost.delete(path)) log.debug(`the lock of ${path}, lost, is left to its new holder`)
    else await rmdir(lockDir).catch((e: unknown) => log.warn(`the lock of ${path} could not be released (${(e as Error).message})`, { event: "file_lock_lost", file: path }))
  }
}

/** Takes the lock directory; resolves with its time as set. */
const acquire = async (path: string, lockDir: string): Promise<number> => {
  const deadline = performance.now() + WAIT_MS
  for (;;) {
    try {
      await mkdir(lockDir)
      return (await stat(lockDir)).mtimeMs
    } catch (e) {
      if (errnoOf(e) !== "EEXIST") throw e
    }
    const held = await stat(lockDir).then((s) => s.mtimeMs, () => undefined)
    if (held !== undefined && Date.now() - held > STALE_MS) {
      // A dead holder's: moved aside (one taker wins the rename), then removed.
      const aside = `${lockDir}.${process.pid}.${randomBytes(4).toString("hex")}.stale`
      if (await rename(lockDir, aside).then(() => true, () => false)) {
        log.warn(`the lock of ${path} was not refreshed for ${Math.round((Date.now() - held) / 1000)} s: its holder is gone, the lock is taken over`, { event: "file_lock_taken_over", file: path })
        await rmdir(aside).catch(() => undefined)
      }
      continue
    }
    if (performance.now() > deadline) throw new FileLockTimeout(path)
    await new Promise((resolve) => setTimeout(resolve, RETRY_MS))
  }
}
