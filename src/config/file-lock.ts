/**
 * The read-change-write of a file that more than one process writes (the running store and the
 * CLI: the services file, the authorization server's file, the keys file) under one lock, so that
 * a write never lands between another's read and write and undoes it. A lock directory beside the
 * file (`<file>.lock`, proper-lockfile): held while its holder lives, taken over once its holder
 * stopped refreshing it (a killed process), and waited for within a bound.
 */
import * as nodeFs from "node:fs"
import { lock } from "proper-lockfile"
import { log } from "../logging/log.js"

/**
 * Node's own fs, not the default graceful-fs (which queues and retries on EMFILE, hiding a real
 * failure), as a plain object: the library keeps a note on the object it is given.
 */
const fs = { ...nodeFs }

/**
 * A lock not refreshed for this long is a dead holder's, and taken over (ms); a live holder
 * refreshes it every second. Short: a store killed while it wrote leaves its lock behind, and the
 * next writer waits this long. The library's least.
 */
const STALE_MS = 2_000
/** How long a writer waits for the lock before it gives up with `FileLockTimeout` (ms, about): past a killed holder's lock. */
const WAIT_MS = 8_000

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
  /** As the library's own refusal: the CLI prints an error with a code as one line. */
  readonly code = "ELOCKED"
  constructor(readonly path: string) {
    super(`${path} is being changed by another process (its lock ${path}.lock was held for over ${WAIT_MS / 1000} s); try again`)
  }
}

/**
 * Runs `change` (a read, a change, a write of `path`) while holding the file's lock; rejects with
 * `FileLockTimeout` when another process holds it for longer than `WAIT_MS`.
 */
export const withFileLock = async <A>(path: string, change: () => Promise<A>): Promise<A> => {
  let release: () => Promise<void>
  try {
    release = await lock(path, {
      realpath: false,
      fs,
      stale: STALE_MS,
      update: 1_000,
      retries: { retries: Math.ceil(WAIT_MS / 100), minTimeout: 25, maxTimeout: 100, factor: 1.5 },
      onCompromised: (e) => {
        lost.add(path)
        log.warn(`the lock of ${path} was lost while held (${e.message}): the change under way is not written`, { event: "file_lock_lost", file: path })
      }
    })
  } catch (e) {
    if ((e as { code?: unknown }).code === "ELOCKED") throw new FileLockTimeout(path)
    throw e
  }
  try {
    return await change()
  } finally {
    lost.delete(path)
    await release().catch((e: unknown) => log.warn(`the lock of ${path} could not be released (${(e as Error).message})`, { event: "file_lock_lost", file: path }))
  }
}
