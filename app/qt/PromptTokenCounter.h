// PromptTokenCounter: a prompt's token count as A1111 shows it beside the prompt ("n/75":
// core/text/PromptParser.h chunkPrompt's tokenCount), with the textual-inversion embeddings a run
// would find in it counted as A1111 counts them: each vector one token, placed so it never
// straddles two chunks (tessera-cli tokens counts the same way).
//
// The tokenizer of the SD model (its tokenizer/ folder, else the bundled CLIP vocabulary) is read
// once per source and kept. The embeddings are listed (core/run/EmbeddingFile.h embeddingFolders,
// listEmbeddingFiles) and read for their vector counts (core/models/clip/TextualInversionFile.h)
// once per change of the embeddings folders, and kept without their vectors; a file that cannot
// be read is left out (A1111 reads its name as words). All of it, and the count, runs on the
// counter's own queue, never on the calling thread; only the newest request per field is answered.
//
// Threads: create, use and destroy on one thread (the GUI thread); the destructor waits for the
// job in flight and drops its answer.
#pragma once

#include <map>
#include <memory>

#include <QObject>
#include <QString>

#include "app/qt/JobQueue.h"
#include "core/run/RunConfig.h"

namespace tessera {

class PromptTokenCounter : public QObject {
    Q_OBJECT
public:
    explicit PromptTokenCounter(QObject* parent = nullptr);
    ~PromptTokenCounter() override;

    // Counts `prompt` for a run of `config` (its model: an SD pipeline folder, a checkpoint or
    // random:sd15 / random:sd21; its embeddingsDir), off this thread. A FLUX.1 model counts T5's
    // tokens (its folder's tokenizer_2/spiece.model, or the one beside the T5 file of
    // config.textEncoders), without the end token. `field` ("prompt",
    // "negative_prompt") keys the answers: only the newest request per field is answered, by
    // counted (tokens -1 and the reason when it cannot count). Returns the job's id.
    quint64 count(const RunConfig& config, const QString& field, const QString& prompt);

    // How many times the embeddings folders were listed and their files read, since construction.
    int embeddingScans() const;
    // Jobs not answered yet.
    int pendingJobs() const { return jobs_.pending(); }

signals:
    // `embeddings`: how many embedding names the prompt used (0 when none).
    void counted(quint64 jobId, const QString& field, int tokens, int embeddings, const QString& error);

private:
    struct Cache;
    std::shared_ptr<Cache> cache_;          // shared with the jobs; locked inside
    std::map<QString, quint64> countJobs_;  // the newest count() per field
    JobQueue jobs_{1};                      // last member: destroyed (waited for) first
};

}  // namespace tessera
