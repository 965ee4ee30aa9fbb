#include "app/qt/PromptTokenCounter.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <QDir>

#include "app/qt/GuiThreadGuard.h"
#include "app/qt/RunWorker.h"
#include "core/models/clip/TextualInversionFile.h"
#include "core/models/flux/FluxFiles.h"
#include "core/models/flux/FluxModel.h"
#include "core/models/flux/FluxTextFiles.h"
#include "core/models/sd/SdModel.h"
#include "core/run/EmbeddingFile.h"
#include "core/run/ModelFileLookup.h"
#include "core/run/TextEncoderFile.h"
#include "core/text/EmbeddingDatabase.h"
#include "core/text/PromptParser.h"
#include "core/text/T5Tokenizer.h"

namespace tessera {

namespace {

struct Count {
    int tokens = 0;
    int embeddings = 0;
};

}  // namespace

struct PromptTokenCounter::Cache {
    std::mutex mutex;  // guards everything below; held by one job at a time (the queue runs one)
    std::map<std::string, std::shared_ptr<const ClipTokenizer>> tokenizers;  // by source
    // The embeddings of the folders listed last, without their vectors (only the counts matter).
    std::vector<std::string> folders;
    bool listed = false;
    std::vector<TextualInversion> embeddings;
    std::map<std::string, std::shared_ptr<const EmbeddingDatabase>> databases;  // by tokenizer source
    std::map<std::string, std::shared_ptr<const T5Tokenizer>> t5Tokenizers;     // by spiece.model path
    std::atomic<int> scans{0};

    // FLUX.1's T5 tokenizer: tokenizer_2/spiece.model of a folder, or the one beside the T5 file a
    // transformer file is given. Throws ModelError / ValidationError naming what is missing.
    std::shared_ptr<const T5Tokenizer> t5TokenizerFor(const RunConfig& config) {
        std::string spiece;
        if (isFluxSingleFile(config.model)) {
            const char* variable = std::getenv(kModelsFolderVariable);
            const std::vector<std::string> folders = modelsFolders(variable ? variable : "", config.model);
            for (const std::string& e : config.textEncoders) {
                const std::string path = findTextEncoderFile(e, folders).path;
                if (textEncoderFileKind(path) == TextEncoderFileKind::T5) spiece = t5TokenizerBeside(path);
            }
            if (spiece.empty())
                throw ModelError(config.model +
                                 ": no T5 text encoder file chosen (its spiece.model holds the tokenizer)");
        } else {
            spiece = QDir(QString::fromStdString(config.model))
                         .filePath(QStringLiteral("tokenizer_2/spiece.model"))
                         .toStdString();
        }
        auto& slot = t5Tokenizers[spiece];
        if (!slot) slot = std::make_shared<const T5Tokenizer>(spiece);
        return slot;
    }

    // The tokenizer of `model` and its source (the key of databases).
    std::pair<std::shared_ptr<const ClipTokenizer>, std::string> tokenizerFor(const std::string& model) {
        const QString path = QString::fromStdString(model);
        const bool own =
            !path.startsWith(QString::fromLatin1(kRandomModelPrefix)) && QDir(path).exists(QStringLiteral("tokenizer"));
        useBundledClipVocabulary();
        const std::string source =
            own ? QDir(path).filePath(QStringLiteral("tokenizer")).toStdString() : bundledClipVocabulary();
        if (const auto it = tokenizers.find(source); it != tokenizers.end()) return {it->second, source};
        // Counts do not depend on the pad token (SD 1.x vs 2.x): one bundled tokenizer serves both.
        auto tokenizer = own ? std::make_shared<const ClipTokenizer>(ClipTokenizer::fromDiffusersFolder(source))
                             : bundledTokenizer(SdFamily::SD1);
        tokenizers.emplace(source, tokenizer);
        return {std::move(tokenizer), source};
    }

    // Lists and reads the embeddings again when the folders changed.
    void followFolders(const std::vector<std::string>& now) {
        if (listed && now == folders) return;
        scans.fetch_add(1);
        folders = now;
        listed = false;  // until the listing below succeeds: a failed one is tried again
        embeddings.clear();
        databases.clear();
        for (const EmbeddingFileEntry& file : listEmbeddingFiles(folders)) {
            try {
                TextualInversion e = readTextualInversion(file.path);
                e.byEncoder.clear();  // the vectors themselves are the run's business
                embeddings.push_back(std::move(e));
            } catch (const InputFileError&) {
                // A1111 skips a file it cannot load; its name in a prompt is then words.
            }
        }
        listed = true;
    }

    Count count(const RunConfig& config, const std::string& text) {
        assertNotGuiThread("PromptTokenCounter count");
        std::lock_guard lock(mutex);
        // FLUX.1: what T5 reads (CLIP-L's 77 give only the pooled vector); no embeddings.
        if (isRandomFluxName(config.model)) {  // T5 reads the bundled CLIP tokenizer's ids (foldedT5Ids)
            useBundledClipVocabulary();        // not read yet when this is the window's first count
            return Count{static_cast<int>(bundledTokenizer(SdFamily::SD1)->encode(text).size()), 0};
        }
        if (isFluxModelPath(config.model) || isFluxSingleFile(config.model))
            return Count{static_cast<int>(t5TokenizerFor(config)->tokenize(text).size()), 0};
        const auto tokenizer = tokenizerFor(config.model);
        const char* models = std::getenv(kModelsFolderVariable);
        followFolders(embeddingFolders(config, models ? models : ""));
        PromptChunkOptions options;
        if (!embeddings.empty()) {
            auto& database = databases[tokenizer.second];
            if (!database) database = std::make_shared<const EmbeddingDatabase>(*tokenizer.first, embeddings);
            options.embeddings = database.get();
        }
        const PromptChunks chunks = chunkPrompt(*tokenizer.first, text, options);
        std::set<std::size_t> used;
        for (const PromptChunk& chunk : chunks.chunks)
            for (const PromptChunkFix& fix : chunk.fixes) used.insert(fix.embedding);
        return Count{chunks.tokenCount, static_cast<int>(used.size())};
    }
};

PromptTokenCounter::PromptTokenCounter(QObject* parent) : QObject(parent), cache_(std::make_shared<Cache>()) {}

PromptTokenCounter::~PromptTokenCounter() = default;

int PromptTokenCounter::embeddingScans() const { return cache_->scans.load(); }

quint64 PromptTokenCounter::count(const RunConfig& config, const QString& field, const QString& prompt) {
    RunConfig asked;  // only what the count depends on travels
    asked.model = config.model;
    asked.embeddingsDir = config.embeddingsDir;
    asked.textEncoders = config.textEncoders;
    const quint64 id =
        jobs_.start([cache = cache_, asked, text = prompt.toStdString()] { return cache->count(asked, text); },
                    [this, field](quint64 job, const Count& result) {
                        if (countJobs_[field] == job) emit counted(job, field, result.tokens, result.embeddings, {});
                    },
                    [this, field](quint64 job, const QString& error) {
                        if (countJobs_[field] == job) emit counted(job, field, -1, 0, error);
                    });
    countJobs_[field] = id;
    return id;
}

}  // namespace tessera
