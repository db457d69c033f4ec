/**
 * The read-change-write of a file that more than one process writes (the running store and the
 * CLI: the services file, the authorization server's file, the keys file) under one lock, so that
 * a write never lands between another's read and write and undoes it. The lock is a directory
 * beside the file (`<file>.lock`: `mkdir` is atomic), known to its holder by its inode, whose time
 * the holder touches every second: one whose time a waiter sees unchanged for `STALE_MS` is a dead
 * holder's and is taken over (judged on the waiter's own clock, so coarse file times and another
 * host's clock do not matter). Written here rather than taken from a library: the one that does
 * this (proper-lockfile) installs handlers for a dozen signals in every process that loads it,
 * which changed how the store ends on some of them.
 */
import { randomBytes } from "node:crypto"
import { mkdir, rename, rmdir, stat, utimes } from "node:fs/promises"
import { log } from "../logging/log.js"
import { errnoCode } from "./errno-code.js"

/** A lock whose time a waiter sees unchanged this long is a dead holder's, and taken over (ms). */
const STALE_MS = 3_000
/** How often a holder touches its lock (ms). */
const REFRESH_MS = 1_000
/** How long a writer waits for the lock before it gives up with `FileLockTimeout` (ms): past a killed holder's lock. */
const WAIT_MS = 8_000
/** The pause between two tries (ms). */
const RETRY_MS = 25

/** A lock this process holds: its directory's inode, and whether it was found taken over. */
interface Held {
  readonly ino: number
  lost: boolean
}

/** The locks this process holds now, by the file they lock. */
const holding = new Map<string, Held>()

/**
 * Rejects when this process holds `path`'s lock no more while it changes the file (another process
 * took it over: this one stalled), so the write would undo another's. `writeAtomically` asks it
 * before it puts a file in place; a file not locked here passes at once.
 */
export const refuseIfLockLost = async (path: string): Promise<void> => {
  const held = holding.get(path)
  if (held === undefined) return
  if (!held.lost && (await inodeOf(`${path}.lock`)) !== held.ino) held.lost = true
  if (held.lost) throw new Error(`${path} was not written: its lock was taken over while it was changed (this process stalled); try again`)
}

/** The lock of a file was held by another process for longer than a writer waits. */
export class FileLockTimeout extends Error {
  /** As a system error's: the CLI prints an error with a code as one line. */
  readonly code = "ELOCKED"
  constructor(readonly path: string) {
    super(`${path} is being changed by another process (its lock ${path}.lock was held for over ${WAIT_MS / 1000} s); try again`)
  }
}

const inodeOf = (dir: string): Promise<number | undefined> => stat(dir).then((s) => s.ino, () => undefined)

/**
 * Runs `change` (a read, a change, a write of `path`) while holding the file's lock; rejects with
 * `FileLockTimeout` when another process holds it for longer than `WAIT_MS`. One change of a path
 * at a time in this process too: the callers queue their own.
 */
export const withFileLock = async <A>(path: string, change: () => Promise<A>): Promise<A> => {
  const lockDir = `${path}.lock`
  const held: Held = { ino: await acquire(path, lockDir), lost: false }
  holding.set(path, held)
  let released = false
  const refresh = setInterval(() => {
    void (async () => {
      const ino = await inodeOf(lockDir)
      if (released || held.lost) return
      if (ino !== held.ino) {
        held.lost = true
        log.warn(`the lock of ${path} was taken over by another process while held: the change under way is not written`, { event: "file_lock_lost", file: path })
        return
      }
      const now = Date.now() / 1000
      await utimes(lockDir, now, now).catch(() => undefined)
    })()
  }, REFRESH_MS)
  refresh.unref()
  try {
    return await change()
  } finally {
    released = true
    clearInterval(refresh)
    if (holding.get(path) === held) holding.delete(path)
    // Removed only while it is still this holder's: a lock taken over is its new holder's.
    if (!held.lost && (await inodeOf(lockDir)) === held.ino) {
      await rmdir(lockDir).catch((e: unknown) => log.warn(`the lock of ${path} could not be released (${(e as Error).message})`, { event: "file_lock_lost", file: path }))
    }
  }
}

/** Takes the lock directory; resolves with its inode. */
const acquire = async (path: string, lockDir: string): Promise<number> => {
  const deadline = performance.now() + WAIT_MS
  // The lock as this waiter first saw it, and when: unchanged for STALE_MS, its holder is gone.
  let seen: { readonly ino: number; readonly mtimeMs: number; readonly at: number } | undefined
  for (;;) {
    try {
      await mkdir(lockDir)
      const ino = await inodeOf(lockDir)
      if (ino !== undefined) return ino
      continue
    } catch (e) {
      if (errnoCode(e) !== "EEXIST") throw e
    }
    const now = await stat(lockDir).catch(() => undefined)
    if (now !== undefined) {
      if (seen === undefined || seen.ino !== now.ino || seen.mtimeMs !== now.mtimeMs) seen = { ino: now.ino, mtimeMs: now.mtimeMs, at: performance.now() }
      else if (performance.now() - seen.at > STALE_MS) {
        // A dead holder's: moved aside (one taker wins the rename), then removed, unless what was
        // moved is not the lock judged stale (another taker's fresh one): that is put back.
        const aside = `${lockDir}.${process.pid}.${randomBytes(4).toString("hex")}.stale`
        if (await rename(lockDir, aside).then(() => true, () => false)) {
          if ((await inodeOf(aside)) === seen.ino) {
            log.warn(`the lock of ${path} was not touched for ${STALE_MS / 1000} s: its holder is gone, the lock is taken over`, { event: "file_lock_taken_over", file: path })
            await rmdir(aside).catch(() => undefined)
          } else await rename(aside, lockDir).catch(() => undefined)
        }
        seen = undefined
        continue
      }
    }
    if (performance.now() > deadline) throw new FileLockTimeout(path)
    await new Promise((resolve) => setTimeout(resolve, RETRY_MS))
  }
}
