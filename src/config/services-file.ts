/**
 * The services configuration file (docs/services-file.md): the single source of truth for
 * service definitions. Changes are serialized and written atomically before they are acknowledged;
 * hand edits are picked up by `watch()` for `--reload`. The document it holds (parsing, shape,
 * drafts) is src/config/services-document.ts; the atomic write and backups src/config/atomic-write.ts.
 */
import { watch as watchFolder, type FSWatcher } from "node:fs"
import { mkdir, readFile, stat } from "node:fs/promises"
import { basename, dirname, resolve as resolvePath } from "node:path"
import { nullPrototypeJson } from "../domain/dict.js"
import { canonicalJson } from "../domain/service-definition.js"
import { log } from "../logging/log.js"
import { errnoCode, sweptOnce, writeAtomically, writeBackup } from "./atomic-write.js"
import { withFileLock } from "./file-lock.js"
import {
  DocumentDraft,
  editText,
  parseText,
  readDocument,
  serialize,
  ServicesFileError,
  type DocumentReading,
  type EntryProblem,
  type JsonObject,
  type ServicesConfig,
  type ServicesDraft
} from "./services-document.js"
import type { DefinitionsStore } from "./definitions-store.js"

export { describeProblem, ServicesFileError, type EntryProblem, type ServicesConfig, type ServicesDraft } from "./services-document.js"

const DEBOUNCE_MS = 100

interface Subscriber {
  readonly onChange: (next: ServicesConfig) => void
  readonly onError: ((error: ServicesFileError) => void) | undefined
}

/**
 * The services configuration file, open for reading and changing. One instance per file per
 * process. Others may change the file too (a person editing it, `mcp-store import`): a change made
 * here is made on the file as it is on disk (see `update`), and with `watch` their changes are
 * applied as they happen.
 */
export class ServicesFile implements DefinitionsStore {
  readonly #path: string
  #doc: JsonObject
  /** The file's content as this process last wrote or adopted it. */
  #text: string
  /** The file has comments or trailing commas: changes are written as edits of `#text`, keeping them. */
  #jsonc: boolean
  /** `#doc` as plain JSON (`serialize`; undefined: not computed since `#doc` last changed). */
  #serialized: string | undefined
  /** The definitions of `#doc` and its entries' problems (undefined: not computed since `#doc` last changed). */
  #reading: DocumentReading | undefined
  #queue: Promise<unknown> = Promise.resolve()
  readonly #subscribers = new Set<Subscriber>()
  #watcher: FSWatcher | undefined
  #timer: NodeJS.Timeout | undefined

  private constructor(path: string, doc: JsonObject, text: string, jsonc: boolean) {
    this.#path = path
    this.#doc = doc
    this.#text = text
    this.#jsonc = jsonc
  }

  /** Makes `doc` the document as stored; what is derived from it is computed when next asked for. */
  #adopt(doc: JsonObject, text: string, serialized?: string): void {
    this.#doc = doc
    this.#text = text
    this.#serialized = serialized
    this.#reading = undefined
  }

  /**
   * Opens the file at `path` (made absolute). A missing file is created as `{"mcpServers": {}}`
   * (mode 0600), with its folder (0700). Rejects with `ServicesFileError` (path and cause) when the
   * file cannot be read, is not valid JSON or has a malformed `mcpServers`/`agents`; such a file is
   * left untouched.
   */
  static async open(path: string): Promise<ServicesFile> {
    const absolute = resolvePath(path)
    let text: string
    try {
      text = await readFile(absolute, "utf8")
    } catch (e) {
      if (errnoCode(e) !== "ENOENT") {
        throw new ServicesFileError(absolute, `cannot be read (${(e as Error).message})`, { cause: e })
      }
      text = serialize({ mcpServers: {} })
      try {
        // A folder made here is private: it is the data space (services file, tool records).
        await mkdir(dirname(absolute), { recursive: true, mode: 0o700 })
        await writeAtomically(absolute, text)
      } catch (e2) {
        throw new ServicesFileError(absolute, `cannot be created (${(e2 as Error).message})`, { cause: e2 })
      }
    }
    const parsed = parseText(absolute, text)
    const file = new ServicesFile(absolute, parsed.doc, text, parsed.jsonc)
    // At start, not at the first write (the swept path is not swept again then).
    await sweptOnce(absolute)
    return file
  }

  /** The file's absolute path. */
  get path(): string {
    return this.#path
  }

  /** The definitions as last written or read (a frozen snapshot). */
  read(): ServicesConfig {
    return (this.#reading ??= readDocument(this.#doc)).config
  }

  /**
   * The entries of the document as last written or read that cannot be used as they are, each
   * with its problem and what was done with it (loaded as unreachable, left out, or a note).
   */
  problems(): ReadonlyArray<EntryProblem> {
    return (this.#reading ??= readDocument(this.#doc)).problems
  }

  /** A copy of the whole document as stored, unknown fields included. */
  raw(): unknown {
    return nullPrototypeJson(this.#doc)
  }

  /**
   * Applies `mutate` to a draft of the document and writes the result before resolving with what
   * `mutate` returned. Updates run one at a time in call order, each on the result of the one
   * before. When `mutate` throws, or the write fails (`ServicesFileError`), the update rejects and
   * both the file and `read()` stay as they were (as someone else left them, if they changed the
   * file meanwhile). A draft with no change writes nothing.
   *
   * Nothing written by someone else is lost: when the file on disk is not what this process last
   * read or wrote, the change is made on the file as it is (and the subscribers of `watch` are told
   * of the other change, as a reload would); when that content is not a services file (a hand edit
   * half done), it is copied to a backup beside the file (`<file>.bak`...) before it is replaced,
   * with a warning.
   */
  update<R>(mutate: (draft: ServicesDraft) => R): Promise<R> {
    // Under the file's lock: `mcp-store import` changes the file too.
    const run = this.#queue.then(() => withFileLock(this.#path, async () => {
      const outside = await this.#outsideChange()
      let changedOutside = false
      if (outside !== undefined && "doc" in outside) {
        changedOutside = canonicalJson(outside.doc) !== canonicalJson(this.#doc)
        this.#jsonc = outside.jsonc
        this.#adopt(outside.doc, outside.text)
      }
      try {
        return await this.#apply(mutate, outside !== undefined && "broken" in outside ? { text: outside.text, problem: outside.broken } : undefined)
      } finally {
        // The other change is told whatever became of this one (written, unchanged, refused).
        if (changedOutside) this.#notify()
      }
    }))
    this.#queue = run.catch(() => undefined)
    return run
  }

  /** `update`'s change itself, on the document as it now is. */
  async #apply<R>(mutate: (draft: ServicesDraft) => R, broken?: { readonly text: string; readonly problem: ServicesFileError }): Promise<R> {
    const draft = new DocumentDraft(nullPrototypeJson(this.#doc) as JsonObject, this.#path)
    let result: R
    try {
      result = mutate(draft)
    } finally {
      draft.close()
    }
    if (result instanceof Promise) {
      result.catch(() => undefined)
      throw new TypeError("ServicesFile.update: mutate must be synchronous")
    }
    const serialized = serialize(draft.doc)
    if (serialized === (this.#serialized ??= serialize(this.#doc))) return result
    // A file with comments is edited in place (its comments and layout kept), a plain one rewritten.
    const text = this.#jsonc ? editText(this.#text, this.#doc, draft.doc) : serialized
    if (broken !== undefined) await this.#saveBroken(broken.text, broken.problem)
    try {
      await writeAtomically(this.#path, text)
    } catch (e) {
      throw new ServicesFileError(this.#path, `cannot be written (${(e as Error).message})`, { cause: e })
    }
    this.#adopt(draft.doc, text, serialized)
    return result
  }

  /**
   * The file as it is on disk when it is not what this process last read or wrote: its document,
   * or why it is not a services file. Undefined when unchanged, missing or unreadable.
   */
  async #outsideChange(): Promise<
    { readonly text: string; readonly doc: JsonObject; readonly jsonc: boolean } | { readonly text: string; readonly broken: ServicesFileError } | undefined
  > {
    let text: string
    try {
      text = await readFile(this.#path, "utf8")
    } catch {
      // Missing (removed by hand: written again) or unreadable (the write says why it fails too).
      return undefined
    }
    if (text === this.#text) return undefined
    try {
      return { text, ...parseText(this.#path, text) }
    } catch (e) {
      if (e instanceof ServicesFileError) return { text, broken: e }
      throw e
    }
  }

  /** Keeps content that is not a services file, about to be replaced, in a backup beside the file. */
  async #saveBroken(text: string, problem: ServicesFileError): Promise<void> {
    let saved: string
    try {
      saved = await writeBackup(this.#path, text, undefined)
    } catch (e) {
      throw new ServicesFileError(this.#path, `holds an edit that is not a services file (${problem.detail}) and it cannot be backed up (${(e as Error).message}): not written`, { cause: e })
    }
    const message = `${this.#path} held an edit that is not a services file (${problem.detail}); it is saved as ${saved} and the file is written with the change`
    log.warn(message, { event: "services_file_backup", file: this.#path, backup: saved })
    this.#report(new ServicesFileError(this.#path, `${problem.detail}; saved as ${saved} before a change was written`))
  }

  /** Tells the subscribers of `watch` the definitions as they now are. */
  #notify(): void {
    const config = this.read()
    for (const s of [...this.#subscribers]) {
      try {
        s.onChange(config)
      } catch (e) {
        s.onError?.(new ServicesFileError(this.#path, `change handler failed (${(e as Error).message})`, { cause: e }))
      }
    }
  }

  /**
   * Copies the file as it is on disk (or as last written, when it is missing) to a new backup file
   * beside it (see `writeBackup`: `<file>.bak` or a unique name; never overwriting, never through a
   * symlink; mode 0600). Runs in turn with `update`. Resolves with the backup's path.
   */
  backup(): Promise<string> {
    const run = this.#queue.then(async () => {
      let text = this.#text
      let mode: number | undefined
      try {
        ;[text, mode] = await Promise.all([readFile(this.#path, "utf8"), stat(this.#path).then((st) => st.mode & 0o7777)])
      } catch (e) {
        if (errnoCode(e) !== "ENOENT") throw new ServicesFileError(this.#path, `cannot be read (${(e as Error).message})`, { cause: e })
      }
      try {
        return await writeBackup(this.#path, text, mode)
      } catch (e) {
        throw new ServicesFileError(this.#path, `cannot be backed up (${(e as Error).message})`, { cause: e })
      }
    })
    this.#queue = run.catch(() => undefined)
    return run
  }

  /**
   * Calls `onChange` with the new definitions when the file is changed by someone else (a hand
   * edit), for `--reload`. Watches the folder, so editors that replace the file are seen; events are
   * debounced (100 ms); content equal to what this process last wrote is ignored, and so is an edit
   * that changes only formatting. Content that is not a valid services file (an edit in progress) is
   * skipped and reported to `onError`, and so is a failing `onChange`. A picked-up edit also becomes
   * the base of the next `update`. Returns the function that stops watching.
   *
   * Throws `ServicesFileError` when the folder cannot be watched.
   */
  watch(onChange: (next: ServicesConfig) => void, onError?: (error: ServicesFileError) => void): () => void {
    const subscriber: Subscriber = { onChange, onError }
    if (this.#watcher === undefined) this.#startWatching()
    this.#subscribers.add(subscriber)
    return () => {
      if (!this.#subscribers.delete(subscriber)) return
      if (this.#subscribers.size === 0) this.#stopWatching()
    }
  }

  #startWatching(): void {
    const name = basename(this.#path)
    try {
      this.#watcher = watchFolder(dirname(this.#path), { persistent: true }, (_event, filename) => {
        if (filename !== null && filename !== name) return
        if (this.#timer !== undefined) clearTimeout(this.#timer)
        this.#timer = setTimeout(() => {
          this.#timer = undefined
          void this.#enqueueReload()
        }, DEBOUNCE_MS)
      })
    } catch (e) {
      throw new ServicesFileError(this.#path, `cannot be watched (${(e as Error).message})`, { cause: e })
    }
    this.#watcher.on("error", (e) => {
      this.#report(new ServicesFileError(this.#path, `cannot be watched (${e.message})`, { cause: e }))
    })
  }

  #stopWatching(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#timer = undefined
    this.#watcher?.close()
    this.#watcher = undefined
  }

  #report(error: ServicesFileError): void {
    for (const s of [...this.#subscribers]) s.onError?.(error)
  }

  /** Re-reads the file after the queued updates, so that this process's own writes are recognised. */
  #enqueueReload(): Promise<void> {
    const run = this.#queue.then(() => this.#reload())
    this.#queue = run.catch(() => undefined)
    return run.catch(() => undefined)
  }

  async #reload(): Promise<void> {
    if (this.#subscribers.size === 0) return
    let text: string
    try {
      text = await readFile(this.#path, "utf8")
    } catch (e) {
      // Between an editor's delete and its rename the file is briefly missing; the rename is seen next.
      if (errnoCode(e) !== "ENOENT") {
        this.#report(new ServicesFileError(this.#path, `cannot be read (${(e as Error).message})`, { cause: e }))
      }
      return
    }
    if (text === this.#text || this.#subscribers.size === 0) return
    let doc: JsonObject
    try {
      const parsed = parseText(this.#path, text)
      doc = parsed.doc
      this.#jsonc = parsed.jsonc
    } catch (e) {
      if (e instanceof ServicesFileError) this.#report(e)
      return
    }
    const changed = canonicalJson(doc) !== canonicalJson(this.#doc)
    this.#adopt(doc, text)
    if (changed) this.#notify()
  }
}
