/**
 * Where the live definitions are kept, as the store and its commands see it: the services file
 * (src/config/services-file.ts, the default) or, in replica mode, the cluster's Redis
 * (src/config/redis-definitions.ts). The commands change definitions only through `update` (a draft of
 * the services document), and the store applies the changes others make through `watch`, the path
 * a hand edit of the file takes with `--reload`; so one store serves both without a second copy of
 * either.
 */
import type { EntryProblem, ServicesConfig, ServicesDraft, ServicesFileError } from "./services-document.js"

export interface DefinitionsStore {
  /**
   * The services file's absolute path: the records, the tokens and the keys live beside it (in
   * replica mode it is the file imported at the first start and the snapshot's base name).
   */
  readonly path: string
  /** The definitions as last written or read (a frozen snapshot). */
  read(): ServicesConfig
  /** The entries that cannot be used as they are (see `ServicesFile.problems`). */
  problems(): ReadonlyArray<EntryProblem>
  /** The whole document as stored (show_mcpconfig). */
  raw(): unknown
  /**
   * Applies `mutate` to a draft and stores the result before resolving with what `mutate` returned;
   * one at a time, in call order. Nothing is changed when `mutate` throws or the write fails.
   */
  update<R>(mutate: (draft: ServicesDraft) => R): Promise<R>
  /** Copies the definitions to a new backup file beside the services file; resolves with its path. */
  backup(): Promise<string>
  /** Calls `onChange` with the definitions each time someone else changes them; returns the unsubscribe. */
  watch(onChange: (next: ServicesConfig) => void, onError?: (error: ServicesFileError) => void): () => void
}
